"""A request's prompt as the engine will see it: its chat template rendered, then its tokenizer's token ids.

The prefix index (prefixindex.py) compares blocks of token ids, so the router must cut a request into the same
tokens the engine will: the model's own `tokenizer.json` (the `tokenizers` package, the one vLLM's fast tokenizers
are) and the chat template from its `tokenizer_config.json`, rendered as Hugging Face's `apply_chat_template`
renders it (jinja2, trim_blocks and lstrip_blocks, `raise_exception`, the generation prompt added) and encoded
without special tokens added, as vLLM encodes a chat request (its template writes them itself).

Only a prompt's beginning has to agree for the routing to work: a long shared system prompt is what it finds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox


class NoTokenizer(ValueError):
    """A folder without a tokenizer.json the router can read; the sentence says what is missing."""


class PromptTokens:
    """One model's tokenizer and chat template."""

    def __init__(self, folder: str | Path) -> None:
        from tokenizers import Tokenizer  # only where a model routes by its cache

        folder = Path(folder)
        path = folder / "tokenizer.json"
        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as e:  # noqa: BLE001 - the tokenizers package raises its own Exception
            raise NoTokenizer(f"no tokenizer to read at {path}: {e}") from None
        config: dict[str, Any] = {}
        try:
            config = json.loads((folder / "tokenizer_config.json").read_text())
        except (OSError, ValueError):
            pass
        template = config.get("chat_template")
        if isinstance(template, list):  # several named templates: the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        self._specials = {k: _token_text(config.get(k)) for k in ("bos_token", "eos_token", "pad_token",
                                                                   "unk_token")}
        self._template = _environment().from_string(template) if isinstance(template, str) else None

    def chat(self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None = None) -> list[int]:
        """The token ids of a chat request's prompt, generation prompt included."""
        if self._template is None:
            text = "".join(f"{m.get('role', '')}: {_content(m.get('content'))}\n" for m in messages)
        else:
            try:
                text = self._template.render(messages=list(messages), tools=tools, add_generation_prompt=True,
                                             **self._specials)
            except jinja2.TemplateError:
                return []  # a request the template refuses: the engine will too; nothing to route by
        return self.text(text)

    def text(self, text: str) -> list[int]:
        """The token ids of `text` as written (a completion's prompt, or a rendered chat)."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # {"content": "<s>", ...} in older configs
        value = value.get("content")
    return value if isinstance(value, str) else None


def _content(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _environment() -> jinja2.Environment:
    # As transformers renders chat templates: sandboxed, blocks trimmed, its two helpers.
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent, ensure_ascii=False)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env
