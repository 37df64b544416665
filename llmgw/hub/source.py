"""`hf:` sources as the catalog and the nodes write them: the repository, the file or a set's base, the revision.

    hf:Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf         main, followed
    hf:Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf@v1.1    a tag or branch, followed
    hf:Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf@<40 hex> one commit: pinned
    hf:Qwen/Qwen2.5-7B-Instruct@<40 hex>                                     a set's base, its files named beside it

The control plane pins what is added (pinning.py) and a node fetches what it is given (agent/weights), both
reading sources with this one parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Hugging Face's rule for organisation and repository names.
_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class SourceError(ValueError):
    """An hf: source that is not written as one; the message says what was expected."""


@dataclass(frozen=True)
class HfSource:
    org: str
    repo: str
    path: str
    """The file within the repository, "" for a set's base."""
    revision: str
    """As written after @, or "main" when nothing was."""

    @property
    def repo_id(self) -> str:
        return f"{self.org}/{self.repo}"

    @property
    def pinned(self) -> bool:
        """Whether the revision is a whole commit, which no push upstream moves."""
        return bool(_COMMIT.match(self.revision))

    def at(self, revision: str) -> str:
        """The same file (or base) at another revision, written as a source."""
        if self.path:
            return f"hf:{self.org}/{self.repo}/{self.path}@{revision}"
        return f"hf:{self.org}/{self.repo}@{revision}"


def is_commit(revision: str) -> bool:
    return bool(_COMMIT.match(revision))


def parse_source(source: str) -> HfSource:
    """The parts of `hf:org/repo[/path/to/file][@revision]`; SourceError says what is wrong."""
    rest = source[3:].split("?", 1)[0].split("#", 1)[0].strip("/")
    org, _, rest = rest.partition("/")
    repo, _, path = rest.partition("/")
    revision = "main"
    if path:
        if "@" in path:
            path, _, revision = path.rpartition("@")
    elif "@" in repo:
        repo, _, revision = repo.partition("@")
    for what, value in (("organisation", org), ("repository", repo)):
        if not _HUB_NAME.match(value or ""):
            raise SourceError(f"{source} is not a Hugging Face source: expected hf:org/repo/file[@revision], "
                              f"and the {what} is {value!r}")
    if not revision:
        raise SourceError(f"{source} has an empty revision after @; give a commit or branch, or leave @ out")
    return HfSource(org, repo, path, revision)
