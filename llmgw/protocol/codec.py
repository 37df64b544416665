"""Dataclasses to JSON and back, strictly: a wrong type is refused naming the field.

The agent and the control plane may run different versions during an
upgrade, so a field one side does not know is ignored (the newer side
adds, never renames) while a field of the wrong type is an error that
names it — a silent default there would place work on a node that
reported nothing.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin

import orjson

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# Only dataclasses are read: their fields are the message's schema.
T = TypeVar("T", bound="DataclassInstance")


class ProtocolError(ValueError):
    """A message that cannot be read: says which field and why."""


def seal(message: Any, type_of: Mapping[type, str], kind: str) -> bytes:
    """A message as `{"type": NAME, "body": {...}}`, its NAME from `type_of`; `kind` says whose messages they are.

    The agent link (llmgw/protocol) and the worker channel (llmgw/control/workers) share this envelope.
    """
    name = type_of.get(type(message))
    if name is None:
        raise TypeError(f"{type(message).__name__} is not {kind}")
    return orjson.dumps({"type": name, "body": to_dict(message)})


def unseal(raw: bytes | str, messages: Mapping[str, type[Any]]) -> Any:
    """What `seal` wrote, as its message; ProtocolError naming what is wrong."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ProtocolError(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("type"), str):
        raise ProtocolError('a message is {"type": NAME, "body": {...}}')
    cls = messages.get(doc["type"])
    if cls is None:
        raise ProtocolError(f"unknown message type {doc['type']!r}; known: {', '.join(sorted(messages))}")
    return from_dict(cls, doc.get("body") or {}, doc["type"])


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def to_dict(obj: Any) -> Any:
    """A dataclass (and what it holds) as plain JSON types; fields at their default are left out."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.default is not dataclasses.MISSING and value == f.default:
                continue
            if f.default_factory is not dataclasses.MISSING and value == f.default_factory():
                continue
            out[f.name] = to_dict(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def from_dict(cls: type[T], data: Any, where: str = "") -> T:
    """`data` read as `cls`; raises ProtocolError naming the field that is wrong."""
    if not isinstance(data, dict):
        raise ProtocolError(f"{where or cls.__name__}: expected an object, got {type(data).__name__}")
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ProtocolError(f"{_join(where, f.name)}: missing")
            continue
        kwargs[f.name] = _value(hints[f.name], data[f.name], _join(where, f.name))
    return cls(**kwargs)


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _value(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _value(inner[0], value, where)
        raise ProtocolError(f"{where}: unions of several types are not supported")
    # A hint is a class, never an instance: isinstance says so to the checker.
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: expected a list, got {type(value).__name__}")
        (item,) = get_args(tp)[:1] or (Any,)
        items = [_value(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: expected an object, got {type(value).__name__}")
        _, item = get_args(tp) or (str, Any)
        return {str(k): _value(item, v, f"{where}.{k}") for k, v in value.items()}
    if origin is typing.Literal:
        if value not in get_args(tp):
            allowed = ", ".join(repr(a) for a in get_args(tp))
            raise ProtocolError(f"{where}: expected one of {allowed}, got {value!r}")
        return value
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(f"{where}: expected a number, got {type(value).__name__}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(f"{where}: expected a whole number, got {type(value).__name__}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ProtocolError(f"{where}: expected true or false, got {type(value).__name__}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ProtocolError(f"{where}: expected text, got {type(value).__name__}")
        return value
    raise ProtocolError(f"{where}: no reader for {tp!r}")
