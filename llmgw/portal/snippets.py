"""What each tool needs to reach this gateway: the code or settings to copy, filled in.

The snippets are plain text (a Python file, a TOML file, shell lines), so they
are rendered by an environment of their own without HTML escaping, each value
quoted for its language (`tojson` gives a double-quoted string that Python,
JavaScript, TOML and YAML all read; `shell` quotes for sh). The page escapes
the finished text once, as HTML, when it shows it. The key goes into
$LLMGW_API_KEY wherever a tool reads the environment, so only the one
`export` line (and Continue's .env, and Cline's form) ever holds the secret.
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass

import jinja2

from llmgw.errors import N_

KEY_VARIABLE = "LLMGW_API_KEY"


@dataclass(frozen=True)
class Step:
    """One thing to do: a sentence (an N_() msgid, with `{path}` filled in) and the text to copy, if any."""

    say: str
    code: str = ""
    language: str = "text"
    path: str = ""


@dataclass(frozen=True)
class Tool:
    id: str
    name: str  # an N_() msgid
    steps: tuple[Step, ...]
    env: bool  # reads the key from $LLMGW_API_KEY, so key_step() comes first


# (tool id, name, [(sentence, template, language, path)]) in the order the page lists them.
_TOOLS: tuple[tuple[str, str, tuple[tuple[str, str, str, str], ...]], ...] = (
    # First: llmgw's own extension, which this gateway makes with its address in it (vscode_pages.py).
    ("vscode", N_("VS Code"), (
        (N_("Download llmgw's extension for VS Code from this gateway and install it (--force puts it over an "
            "older one):"), "vscode.sh.jinja", "shell", ""),
        (N_("In VS Code, run llmgw: Sign In from the Command Palette. This page opens with VS Code chosen; make "
            "a key, and Open in VS Code hands it to the extension, which keeps it in VS Code's secret storage. "
            "llmgw: Enter API Key takes a key pasted instead. The gateway's models are then in the chat's model "
            "picker, and any extension that asks VS Code for a model can use them."), "", "text", ""),
    )),
    ("python", N_("OpenAI Python"), (
        (N_("Install the library with pip install openai, then run:"), "python.py.jinja", "python", ""),)),
    ("javascript", N_("OpenAI JavaScript"), (
        (N_("Install the library with npm install openai, then run this as {path}:"), "javascript.mjs.jinja",
         "javascript", "hello.mjs"),)),
    ("curl", N_("curl"), (
        (N_("Ask for an answer from a shell:"), "curl.sh.jinja", "shell", ""),)),
    ("continue", N_("VS Code with Continue"), (
        (N_("Save this as {path}; Continue lists it beside your own assistants and leaves config.yaml alone:"),
         "continue.yaml.jinja", "yaml", "~/.continue/assistants/llmgw.yaml"),
        (N_("Continue reads the key from {path}; add this line to it:"), "continue.env.jinja", "text",
         "~/.continue/.env"),
    )),
    ("codex", N_("Codex CLI"), (
        (N_("Add this to {path} (the first two lines above any [table] in it), then run codex where "
            "LLMGW_API_KEY is exported:"), "codex.toml.jinja", "toml", "~/.codex/config.toml"),)),
    ("cline", N_("Cline"), (
        (N_("In Cline's settings choose the provider OpenAI Compatible and fill in:"), "cline.txt.jinja", "text",
         ""),)),
    ("claude", N_("Claude Code"), (
        (N_("Claude Code speaks Anthropic's API, which the gateway serves at its address without /v1. "
            "Start it like this:"), "claude.sh.jinja", "shell", ""),)),
)
# These take the key in a file or form of their own rather than from the environment.
_OWN_KEY_FIELD = ("vscode", "continue", "cline")
TOOLS = tuple(tool for tool, _, _ in _TOOLS)
NAMES = {tool: name for tool, name, _ in _TOOLS}  # N_() msgids


def key_step(key: str) -> Step:
    """The one line that puts the key in the environment, shown above every tool."""
    return Step(N_("Put your key in the environment of the shell you run the tool from:"),
                _env().get_template("key.sh.jinja").render(key=key), "shell")


def tools(*, base: str, model: str, key: str) -> list[Tool]:
    """Every tool's steps for a gateway at `base` (scheme and host, no /v1), one model and a key.

    `key` is the secret when it was made on this page, else a placeholder
    naming the chosen key's prefix: the gateway keeps only a digest.
    """
    base = base.rstrip("/")
    values = {"base": base, "v1": base + "/v1", "model": model, "key": key}
    env = _env()
    return [Tool(ident, name, tuple(Step(say, env.get_template(template).render(values) if template else "",
                                         language, path)
                                    for say, template, language, path in steps), ident not in _OWN_KEY_FIELD)
            for ident, name, steps in _TOOLS]


def placeholder(prefix: str | None) -> str:
    """What stands for a key whose secret this page cannot know: its prefix and an ellipsis."""
    return f"{prefix or 'sk-llmgw-'}…"


@functools.cache
def _env() -> jinja2.Environment:
    # Built once: the templates ship with the package and never change while it runs. Not autoescaped: a
    # snippet is shell, Python or JSON text (shlex quotes its values), escaped as HTML where the page shows it.
    env = jinja2.Environment(loader=jinja2.PackageLoader("llmgw.portal", "templates/snippets"),
                             autoescape=False, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)  # noqa: S701
    env.filters["shell"] = lambda value: shlex.quote(str(value))
    return env
