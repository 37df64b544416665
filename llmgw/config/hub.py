"""Where models from Hugging Face are asked about when they are added, and whose are taken without a second word."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from llmgw.config.loader import Invalid
from llmgw.config.types import describe
from llmgw.errors import N_

# The organisations whose models the original's PoC served without anyone checking their training; the list.
DEFAULT_TRUSTED = ("Qwen", "meta-llama", "mistralai", "google", "microsoft", "deepseek-ai", "ibm-granite", "nvidia")
_PUBLISHER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class HubSettings:
    endpoint: str = "https://huggingface.co"
    """The Hugging Face hub the control plane asks when a model is added from it (`hf:org/repo/file`): the commit
    a revision is now, each file's size and sha256, and Hugging Face's scan of each. A site's own hub speaking the
    same API may stand in. The nodes fetch from the agent's `weights.hf_endpoint`, or from the mirror."""

    token_file: str = ""
    """A file on each control plane holding a Hugging Face token, for gated and private repositories; read at each
    use. Empty: public repositories only."""

    trusted_publishers: list[str] = field(default_factory=lambda: list(DEFAULT_TRUSTED))
    """The organisations (the `org` of `hf:org/repo`) whose models an administrator may add as they are. A model
    from anyone else is added only with `--trust` (the portal: "I have checked this publisher"), and who said so is
    kept in the model's origin and the audit log. Compared without regard to case."""

    def validate(self) -> None:
        if not self.endpoint.startswith(("http://", "https://")):
            raise Invalid("endpoint", N_("expected an http:// or https:// address, got {value}"),
                          params={"value": describe(self.endpoint)})
        for i, name in enumerate(self.trusted_publishers):
            if not _PUBLISHER.match(name):
                raise Invalid(f"trusted_publishers[{i}]", N_("{value} is not a Hugging Face organisation's name"),
                              params={"value": describe(name)})

    def trusts(self, publisher: str) -> bool:
        return publisher.lower() in {p.lower() for p in self.trusted_publishers}
