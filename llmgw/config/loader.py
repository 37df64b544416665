"""A strict loader from parsed YAML into dataclasses, driven by their type hints.

Strict because a configuration mistake found at start costs a minute and
one found in production costs an incident: an unknown key is refused with
the nearest known one ("router.cahce: unknown key; did you mean
router.cache?"), a wrong value with the form expected, and every message
names the key's full path, list items included ("models[2].name").

A dataclass may define `validate(self)`, raising `Invalid(key, message)`
for rules that span fields; the loader calls it once the object is built
and puts the object's own path in front of `key`.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import yaml

from llmgw.config.types import Address, Duration, Size, describe
from llmgw.errors import ExpectedError

__all__ = [
    "ConfigError",
    "Invalid",
    "from_dict",
    "to_dict",
    "load_file",
    "parse_yaml",
    "get_path",
    "set_path",
    "unset_path",
    "field_hints",
]

T = TypeVar("T")


class ConfigError(ExpectedError):
    """A configuration that can't be used; str() is the whole sentence to show.

    `key` is the dotted path of the key at fault ("" when it is the whole
    document or the file).
    """

    def __init__(self, message: str, key: str = "", *, problem: Invalid | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.key = key
        # The validate() refusal this wraps, whose template and params say it in another language.
        self.problem = problem

    def __str__(self) -> str:
        return self.message


class Invalid(Exception):
    """Raised by a dataclass's validate(): `key` is relative to that dataclass.

    Raised as `Invalid("max", N_("{max} is fewer than min ({min})"), params=…)`,
    it keeps the untranslated template and its parameters as ExpectedError does
    (the portal says it in the reader's language); `message` is the English
    sentence, formatted only when params are given, and str() puts the key first.
    """

    def __init__(self, key: str, message: str, *, params: Mapping[str, object] | None = None) -> None:
        self.template = message
        self.params: dict[str, object] = dict(params) if params is not None else {}
        self.message = message.format(**self.params) if params is not None else message
        super().__init__(f"{key}: {self.message}" if key else self.message)
        self.key = key


# --- YAML ----------------------------------------------------------------

class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's booleans, no timestamps, and no repeated keys.

    PyYAML follows YAML 1.1, where yes/no/on/off are booleans: "metrics: off"
    would arrive as False and "country: NO" as False too. Only true and false
    are booleans here. A key given twice in one mapping is refused rather
    than the last one quietly winning.
    """


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a key here is a list or mapping; keys must be plain words", key_node.start_mark
            ) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"{key} is given twice in the same mapping (first on line {seen[key].start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def parse_yaml(text: str) -> Any:
    """Parse YAML text the way configuration files are read; raises yaml.YAMLError."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 -- _Loader is a SafeLoader


_BARE_IPV6 = re.compile(r"(?<![\"'])\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\]:\d+")


def _yaml_error(err: yaml.YAMLError, text: str = "") -> str:
    """PyYAML's complaint cut to its line, column and problem, with a hint for the two common slips."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    if mark is None:
        return problem
    line = text.splitlines()[mark.line] if mark.line < len(text.splitlines()) else ""
    hint = ""
    if "\t" in problem or "\\t" in problem:
        hint = "; indent with spaces, not tabs"
    elif _BARE_IPV6.search(line):
        hint = '; put an IPv6 address in quotes, as in "[::1]:9090"'
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}{hint}"


# --- type hints ----------------------------------------------------------

_HINTS: dict[type, dict[str, Any]] = {}


def field_hints(cls: type) -> dict[str, Any]:
    """The resolved type of each of a dataclass's fields, by name, in field order."""
    hints = _HINTS.get(cls)
    if hints is None:
        resolved = typing.get_type_hints(cls)
        hints = {f.name: resolved[f.name] for f in dataclasses.fields(cls)}
        _HINTS[cls] = hints
    return hints


def _optional_inner(hint: Any) -> Any | None:
    """X for `X | None`, else None."""
    if get_origin(hint) in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(get_args(hint)) == 2:
            return args[0]
    return None


def _is_dataclass_type(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _fail(path: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {message}" if path else message, key=path)


# --- from_dict -----------------------------------------------------------

def from_dict(cls: type[T], data: dict[str, Any] | None, *, path: str = "") -> T:
    """Build `cls` from a parsed document, refusing what it does not know.

    `data` None (an empty file) gives every default. `path` is put in front
    of every key named in an error, for a document that is part of a larger
    one.
    """
    # _convert walks any hint, so it answers Any; given a dataclass it
    # builds that dataclass or raises.
    built: T = _convert(cls, data, path)
    return built


def _convert(hint: Any, value: Any, path: str) -> Any:
    if hint is Any:
        return value
    inner = _optional_inner(hint)
    if inner is not None:
        return None if value is None else _convert(inner, value, path)
    if _is_dataclass_type(hint):
        return _build(hint, value, path)
    origin = get_origin(hint)
    if origin is Literal:
        choices = get_args(hint)
        if value in choices and type(value) in {type(c) for c in choices}:
            return value
        words = "|".join(str(c) for c in choices)
        raise _fail(path, f"expected one of {words}, got {describe(value)}")
    if origin is list:
        (item_hint,) = get_args(hint) or (Any,)
        if value is None:
            return []
        if not isinstance(value, list):
            raise _fail(path, f"expected a list, got {describe(value)}")
        return [_convert(item_hint, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        key_hint, value_hint = get_args(hint) or (str, Any)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _fail(path, f"expected a mapping, got {describe(value)}")
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _fail(path, f"keys must be text, got {describe(k)}")
            out[k] = _convert(value_hint, v, _join(path, k))
        return out
    if isinstance(hint, type) and issubclass(hint, (Duration, Size, Address)):
        try:
            return hint.parse(value)
        except ValueError as err:
            raise _fail(path, str(err)) from None
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _fail(path, f"expected true or false, got {describe(value)}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _fail(path, f"expected a whole number, got {describe(value)}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _fail(path, f"expected a number, got {describe(value)}")
    if hint is str:
        if isinstance(value, str):
            return value
        hint_text = ""
        if isinstance(value, (int, float, bool)):
            hint_text = f"; put it in quotes if you mean the text: \"{describe(value)}\""
        raise _fail(path, f"expected text, got {describe(value)}{hint_text}")
    raise TypeError(f"the configuration loader does not know the type {hint!r} (at {path or 'the top'})")


def _build(cls: type, value: Any, path: str) -> Any:
    if value is None:
        value = {}
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        where = f"{path}: " if path else ""
        raise ConfigError(f"{where}expected a mapping of keys, got {describe(value)}", key=path)
    hints = field_hints(cls)
    for key in value:
        if not isinstance(key, str):
            raise _fail(path, f"keys must be text, got {describe(key)}")
        if key not in hints:
            raise _unknown(path, key, list(hints))
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in value:
            kwargs[f.name] = _convert(hints[f.name], value[f.name], _join(path, f.name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _fail(_join(path, f.name), "required, and not set")
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except Invalid as err:
            key = err.key
            full = (f"{path}{key}" if key.startswith("[") else _join(path, key)) if key else path
            raise ConfigError(f"{full}: {err.message}" if full else err.message, key=full, problem=err) from None
    return obj


def _unknown(path: str, key: str, known: list[str]) -> ConfigError:
    full = _join(path, key)
    near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if near:
        return ConfigError(f"{full}: unknown key; did you mean {_join(path, near[0])}?", key=full)
    where = f"under {path}" if path else "at the top"
    return ConfigError(f"{full}: unknown key; the keys {where} are {', '.join(known)}", key=full)


# --- to_dict -------------------------------------------------------------

def to_dict(obj: Any) -> Any:
    """A dataclass as plain values (str, int, float, bool, None, list, dict) that YAML and JSON can write.

    Durations, sizes and addresses are written in their text form, so
    from_dict(type(x), to_dict(x)) == x.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (Duration, Size, Address)):
        return str(obj)
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    raise TypeError(f"{type(obj).__name__} can't be written into a configuration document")


# --- files ---------------------------------------------------------------

def load_file(cls: type[T], path: str) -> T:
    """Read a YAML file into `cls`; every error is prefixed with the file as given."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a file") from None
    except PermissionError:
        raise ConfigError(f"{path}: not readable by this user; run as the service's user or as root") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start} can't be read)") from None
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: {_yaml_error(err, text)}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected keys at the top level (like `log:` with `level: info` under it), got {describe(data)}"
        )
    try:
        return from_dict(cls, data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}", key=err.key, problem=err.problem) from None


# --- dotted paths --------------------------------------------------------

_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _steps(dotted: str) -> list[str | int]:
    """'models[2].name' -> ['models', 2, 'name']; refuses what is not a path."""
    steps: list[str | int] = []
    pos = 0
    text = dotted.strip()
    while pos < len(text):
        if steps and text[pos] == ".":
            pos += 1
        m = _STEP.match(text, pos)
        if not m:
            raise ConfigError(f"{dotted!r} is not a key path; write it like router.cache.max_bytes or models[0].name")
        steps.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        pos = m.end()
    if not steps or isinstance(steps[0], int):
        raise ConfigError(f"{dotted!r} is not a key path; write it like router.cache.max_bytes or models[0].name")
    return steps


def _show(steps: list[str | int]) -> str:
    out = ""
    for s in steps:
        out = f"{out}[{s}]" if isinstance(s, int) else _join(out, s)
    return out


def _hint_at(cls: type, steps: list[str | int]) -> Any:
    """The type hint of the key at `steps`, refusing a path the schema lacks."""
    hint: Any = cls
    for i, step in enumerate(steps):
        hint = _optional_inner(hint) or hint
        here = _show(steps[:i])
        if isinstance(step, int):
            if get_origin(hint) is not list:
                raise _fail(here, "is not a list, so it has no items to number")
            hint = get_args(hint)[0]
        elif _is_dataclass_type(hint):
            known = field_hints(hint)
            if step not in known:
                raise _unknown(here, step, list(known))
            hint = known[step]
        elif get_origin(hint) is dict:
            hint = get_args(hint)[1]
        else:
            raise _fail(_show(steps[: i + 1]), f"unknown key; {here} is a single value, with no keys under it")
    return hint


def get_path(obj: Any, dotted: str) -> Any:
    """The value at a dotted path such as router.cache.max_bytes or models[0].name."""
    steps = _steps(dotted)
    value = obj
    for i, step in enumerate(steps):
        here = _show(steps[:i])
        if isinstance(step, int):
            if not isinstance(value, list):
                raise _fail(here, "is not a list, so it has no items to number")
            if step >= len(value):
                n = len(value)
                raise _fail(_show(steps[: i + 1]), f"there is no such item; {here} has {n} item{'' if n == 1 else 's'}")
            value = value[step]
        elif dataclasses.is_dataclass(value):
            known = [f.name for f in dataclasses.fields(value)]
            if step not in known:
                raise _unknown(here, step, known)
            value = getattr(value, step)
        elif isinstance(value, dict):
            if step not in value:
                raise _fail(_show(steps[: i + 1]), "not set")
            value = value[step]
        else:
            raise _fail(_show(steps[: i + 1]), f"unknown key; {here} is a single value, with no keys under it")
    return value


def _wants_text(hint: Any) -> bool:
    hint = _optional_inner(hint) or hint
    if hint is str or (isinstance(hint, type) and issubclass(hint, Address)):
        return True
    return get_origin(hint) is Literal and all(isinstance(c, str) for c in get_args(hint))


def _parse_raw(hint: Any, raw: str) -> Any:
    """A value typed on a command line, read as YAML ("512MB", "true", "[a, b]", "{x: 1}").

    Text-valued keys take the words as typed, so `name 007` stays "007"
    rather than becoming the number 7.
    """
    try:
        value = parse_yaml(raw)
    except yaml.YAMLError:
        value = raw
    if _wants_text(hint) and not isinstance(value, str):
        if value is None and _optional_inner(hint) is not None:
            return None
        return raw
    return value


def _walk_doc(doc: dict[str, Any], steps: list[str | int], create: bool) -> tuple[Any, str | int] | None:
    """The container holding the last step, and that step; None when absent and not created."""
    node: Any = doc
    for i, step in enumerate(steps[:-1]):
        nxt = steps[i + 1]
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                if not create:
                    return None
                raise _fail(_show(steps[: i + 1]), "there is no such item to change; add it to the list first")
            child = node[step]
        else:
            if not isinstance(node, dict):
                raise _fail(_show(steps[:i]), f"expected a mapping of keys, got {describe(node)}")
            child = node.get(step)
            if child is None:
                if not create:
                    return None
                child = [] if isinstance(nxt, int) else {}
                node[step] = child
        node = child
    return node, steps[-1]


def set_path(cls: type, doc: dict[str, Any] | None, dotted: str, raw: str) -> dict[str, Any]:
    """A new document with the key at `dotted` set from `raw`, checked as `cls` would load it.

    `raw` is read as a YAML value, then the whole result is loaded, so an
    error names the key and nothing half-changed is returned. `doc` itself
    is left as it was.
    """
    steps = _steps(dotted)
    hint = _hint_at(cls, steps)
    value = _parse_raw(hint, raw)
    _convert(hint, value, _show(steps))
    new = copy.deepcopy(doc) if doc else {}
    node, last = _walk_doc(new, steps, create=True)  # type: ignore[misc]
    if isinstance(last, int):
        if not isinstance(node, list) or last > len(node):
            raise _fail(_show(steps), "there is no such item to change; add it to the list first")
        if last == len(node):
            node.append(value)
        else:
            node[last] = value
    else:
        if not isinstance(node, dict):
            raise _fail(_show(steps[:-1]), f"expected a mapping of keys, got {describe(node)}")
        node[last] = value
    from_dict(cls, new)
    return new


def unset_path(cls: type, doc: dict[str, Any] | None, dotted: str) -> dict[str, Any]:
    """A new document without the key at `dotted`, so it is back to its default.

    A list item named by its number is taken out of the list. Mappings left
    empty are dropped, so the document stays as short as what was set.
    """
    steps = _steps(dotted)
    _hint_at(cls, steps)
    new = copy.deepcopy(doc) if doc else {}
    found = _walk_doc(new, steps, create=False)
    if found is not None:
        node, last = found
        if isinstance(last, int):
            if isinstance(node, list) and last < len(node):
                del node[last]
        elif isinstance(node, dict):
            node.pop(last, None)
        _prune(new)
    from_dict(cls, new)
    return new


def _prune(node: Any) -> bool:
    """Drop empty mappings below `node`; True when `node` itself is empty."""
    if isinstance(node, dict):
        for k in list(node):
            if isinstance(node[k], dict) and _prune(node[k]):
                del node[k]
        return not node
    return False
