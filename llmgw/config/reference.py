"""docs/reference.md, generated from the configuration's dataclasses.

Each key's documentation is the string literal written right under its
field; it is read from the class's source with `ast`, so the reference
cannot drift from the code: a key added without one fails the tests.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import textwrap
import types
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from llmgw.config.agent import AgentConfig
from llmgw.config.loader import field_hints, parse_yaml, to_dict
from llmgw.config.mirror import MirrorConfig
from llmgw.config.server import CLUSTER_KEYS, MACHINE_KEYS, ServerConfig
from llmgw.config.types import Address, AddressOrOff, Duration, Size

__all__ = ["field_docs", "missing_docs", "render_reference", "write_reference"]

_DOCS: dict[type, dict[str, str]] = {}


def field_docs(cls: type) -> dict[str, str]:
    """Each field's attribute docstring, by name, inherited fields included."""
    if cls in _DOCS:
        return _DOCS[cls]
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == klass.__name__)
        for stmt, nxt in zip(node.body, node.body[1:], strict=False):  # each statement and the next
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    _DOCS[cls] = docs
    return docs


def _dataclasses_under(cls: type) -> list[type]:
    """`cls` and every dataclass its fields hold, each once, in the order met."""
    seen: list[type] = []

    def visit(hint: Any) -> None:
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            if hint in seen:
                return
            seen.append(hint)
            for sub in field_hints(hint).values():
                visit(sub)
        for arg in get_args(hint):
            visit(arg)

    visit(cls)
    return seen


def missing_docs(*roots: type) -> list[str]:
    """'Class.field' for every field under `roots` written without a docstring."""
    out = []
    for root in roots:
        for cls in _dataclasses_under(root):
            docs = field_docs(cls)
            out += [f"{cls.__name__}.{f.name}" for f in dataclasses.fields(cls) if not docs.get(f.name, "").strip()]
    return sorted(set(out), key=out.index)


# --- words ---------------------------------------------------------------

_PLURAL = {"string": "strings", "integer": "integers", "number": "numbers", "boolean": "booleans",
           "duration": "durations", "size": "sizes", "address": "addresses", "mapping": "mappings"}


def _inner(hint: Any) -> Any:
    if get_origin(hint) in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return None


def type_words(hint: Any) -> str:
    """A key's type as the reference says it: duration, list of strings, one of text|json."""
    inner = _inner(hint)
    if inner is not None:
        return f"{type_words(inner)}, or null"
    origin = get_origin(hint)
    if origin is Literal:
        return "one of " + "|".join(str(c) for c in get_args(hint))
    if origin is list:
        item = type_words(get_args(hint)[0])
        return "list of " + _PLURAL.get(item, item)
    if origin is dict:
        return f"mapping of string to {type_words(get_args(hint)[1])}"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "mapping"
    if isinstance(hint, type):
        for base, words in ((AddressOrOff, "address, or off"), (Address, "address"), (Duration, "duration"),
                            (Size, "size"), (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string")):
            if issubclass(hint, base):
                return words
    return str(hint)


def _yaml_value(value: Any) -> str:
    """A default as a person would write it in the file: 10s, 256MB, "", [], ":8080"."""
    plain = to_dict(value)
    if isinstance(plain, str):
        safe = plain and plain == plain.strip() and not any(c in plain for c in "#'\"[]{},&*!|>%@`")
        if safe and parse_yaml(plain) == plain:
            return plain
        return json.dumps(plain, ensure_ascii=False)
    if isinstance(plain, list):
        return "[" + ", ".join(_yaml_value(v) for v in plain) + "]"
    if isinstance(plain, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in plain.items()) + "}"
    return yaml.safe_dump(plain, default_flow_style=True).strip().removesuffix("\n...")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


# --- rendering -----------------------------------------------------------

@dataclasses.dataclass
class _Key:
    path: str
    type: str
    default: str
    doc: str
    block: bool


def _keys(cls: type, prefix: str = "", only: tuple[str, ...] | None = None) -> list[_Key]:
    out: list[_Key] = []
    hints = field_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if only is not None and f.name not in only:
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        hint = hints[f.name]
        default = _default(f)
        optional = _inner(hint)
        # A hint is a class, never an instance; saying so lets the checker
        # see a dataclass type rather than "a dataclass or an instance".
        nested = hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None
        if optional is not None and isinstance(optional, type) and dataclasses.is_dataclass(optional):
            nested = optional  # a block that may be left out: its keys are still documented
        item = get_args(hint)[0] if get_origin(hint) is list else None
        if nested is not None:
            out.append(_Key(path, type_words(hint), "", docs.get(f.name, ""), True))
            out += _keys(nested, path)
        elif isinstance(item, type) and dataclasses.is_dataclass(item):
            out.append(_Key(path, f"list of mappings ({path}[] below)", _yaml_value(default),
                            docs.get(f.name, ""), True))
            out += _keys(item, f"{path}[]")
        else:
            shown = "required" if default is dataclasses.MISSING else f"`{_yaml_value(default)}`"
            out.append(_Key(path, type_words(hint), shown, docs.get(f.name, ""), False))
    return out


def _section(keys: list[_Key], kept_by: str) -> list[str]:
    lines = ["| key | type | default |", "|---|---|---|"]
    for k in keys:
        if not k.block:
            # A | inside a cell would end it: "one of text|json" is escaped there.
            lines.append(f"| `{k.path}` | {k.type.replace('|', chr(92) + '|')} | {k.default} |")
    lines.append("")
    for k in keys:
        lines.append(f"### `{k.path}`")
        lines.append("")
        if k.block:
            lines.append(f"{k.type[0].upper()}{k.type[1:]}; {kept_by}.")
        else:
            default = "required" if k.default == "required" else f"default {k.default}"
            lines.append(f"{k.type[0].upper()}{k.type[1:]}; {default}; {kept_by}.")
        lines.append("")
        lines.append(k.doc)
        lines.append("")
    return lines


_MACHINE = "this machine's own, read from its server.yaml at start"
_CLUSTER = "the cluster's, changed with `llmgw ctl config set`"
_NODE = "this node's own, read from its agent.yaml at start"
_MIRROR = "this mirror's own, read from its mirror.yaml at start"


def render_reference() -> str:
    """The whole of docs/reference.md, the same text for the same code."""
    lines = [
        "# Configuration reference",
        "",
        "This page is generated by `llmgw docs reference` from the definitions in llmgw/config/; "
        "do not edit it by hand, change the string under the key there.",
        "",
        "Durations are written with a unit: `250ms`, `10s`, `5m`, `1h30m`, `7d` (a bare `0` is allowed). "
        "Sizes are bytes or a number with KB, MB, GB or TB, each 1024 times the one before "
        "(`512KB`, `256MB`, `1GiB`). Addresses are HOST:PORT; an empty host (`:8080`) is every interface, "
        "and an IPv6 host goes in brackets, quoted for YAML's sake (`\"[::1]:8080\"`). "
        "An unknown key or a value of the wrong form is refused at start, naming the key.",
        "",
        "## server.yaml",
        "",
        "A control plane's configuration, `/etc/llmgw/server.yaml` unless `--config` says otherwise. "
        "It holds two kinds of keys. This machine's own are read from the file at every start. "
        "The cluster's settings are the same on every control plane: once the cluster's store exists "
        "they are kept there, changed with `llmgw ctl config set KEY VALUE`, and in force on every "
        "control plane within seconds; in server.yaml they only seed a new store.",
        "",
        "### This machine's keys",
        "",
    ]
    lines += _demote(_section(_keys(ServerConfig, only=MACHINE_KEYS), _MACHINE))
    lines += ["### The cluster's settings", ""]
    lines += _demote(_section(_keys(ServerConfig, only=CLUSTER_KEYS), _CLUSTER))
    lines += [
        "## agent.yaml",
        "",
        "A node's configuration, `/etc/llmgw/agent.yaml` unless `--config` says otherwise, read by "
        "`llmgw agent` at start. What the node runs is the control plane's to decide; this file says "
        "how to reach it and where the node keeps things.",
        "",
    ]
    lines += _section(_keys(AgentConfig), _NODE)
    lines += [
        "## mirror.yaml",
        "",
        "A model mirror's configuration, `/etc/llmgw/mirror.yaml` unless `--config` says otherwise, read by "
        "`llmgw mirror serve` at start; without the file every default holds. Which mirrors the control planes "
        "and nodes use is the cluster's `mirror` settings above (docs/mirror.md).",
        "",
    ]
    lines += _section(_keys(MirrorConfig), _MIRROR)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def _demote(lines: list[str]) -> list[str]:
    return ["#" + line if line.startswith("### ") else line for line in lines]


def write_reference(path: str) -> None:
    """Write render_reference() to `path` (docs/reference.md), making its folder if need be."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_reference())

