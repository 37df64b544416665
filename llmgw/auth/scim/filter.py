"""SCIM filters (RFC 7644 3.4.2.2) and PATCH paths (3.5.2), parsed once and matched against a resource.

Every operator (eq ne co sw ew gt ge lt le pr), and/or/not, parentheses and
value paths (`emails[type eq "work"]`) are understood, on any attribute, so
ServiceProviderConfig can say filtering is supported without a list of
exceptions. Strings compare without regard to case except the attributes
RFC 7643 makes caseExact (id, externalId, a member's value).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from llmgw.auth.scim.errors import ScimError
from llmgw.auth.scim.schemas import CORE
from llmgw.errors import N_

OPERATORS = ("eq", "ne", "co", "sw", "ew", "gt", "ge", "lt", "le")
_CASE_EXACT = {"id", "externalid", "members.value", "$ref"}
_MAX_FILTER = 2000

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<string>"(?:[^"\\]|\\.)*")
    | (?P<punct>[()\[\]])
    | (?P<word>urn:[^\s()\[\]"]+|[A-Za-z_$][\w$-]*(?:\.[A-Za-z_$][\w$-]*)*|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    )""", re.VERBOSE)


@dataclass(frozen=True)
class Attr:
    """An attribute path: `urn` is an extension's schema (None for the core), `names` its dotted parts."""

    urn: str | None
    names: tuple[str, ...]

    def key(self) -> str:
        return ".".join(self.names).casefold()


@dataclass(frozen=True)
class Compare:
    attr: Attr
    op: str
    value: Any


@dataclass(frozen=True)
class Present:
    attr: Attr


@dataclass(frozen=True)
class Logical:
    op: str  # and | or
    left: Node
    right: Node


@dataclass(frozen=True)
class Not:
    inner: Node


@dataclass(frozen=True)
class ValuePath:
    attr: Attr
    inner: Node  # matched against each value of a multi-valued attribute


Node = Compare | Present | Logical | Not | ValuePath


@dataclass(frozen=True)
class PatchPath:
    attr: Attr  # the attribute itself (one name, or name.sub without a filter)
    where: Node | None  # [valFilter]: which values of a multi-valued attribute
    sub: str | None  # .subAttr after the filter


def _bad(text: str, why: str) -> ScimError:
    return ScimError(400, N_('the filter "{filter}" cannot be read: {why}'), scim_type="invalidFilter",
                     params={"filter": text[:200], "why": why})


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    at = 0
    text = text.rstrip()
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None or m.end() == at:
            raise _bad(text, f"nothing expected at {text[at:at + 20].strip()!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        at = m.end()
    return out


def attr_of(word: str) -> Attr:
    """`userName`, `name.givenName`, `urn:…:User:userName` or an extension's `urn:…:enterprise:2.0:User:manager`."""
    urn = None
    if word.lower().startswith("urn:"):
        urn, _, word = word.rpartition(":")
        if any(urn.casefold() == core.casefold() for core in CORE):
            urn = None
    return Attr(urn, tuple(word.split(".")))


class _Parser:
    def __init__(self, text: str):
        if len(text) > _MAX_FILTER:
            raise _bad(text, f"it is longer than {_MAX_FILTER} characters")
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise _bad(self.text, "it ends too soon")
        self.at += 1
        return token

    def expect(self, punct: str) -> None:
        kind, value = self.take()
        if value != punct:
            raise _bad(self.text, f"{punct!r} expected, not {value!r}")

    def word_is(self, *words: str) -> bool:
        token = self.peek()
        return token is not None and token[0] == "word" and token[1].lower() in words

    def filter(self) -> Node:
        node = self.conjunction()
        while self.word_is("or"):
            self.take()
            node = Logical("or", node, self.conjunction())
        return node

    def conjunction(self) -> Node:
        node = self.factor()
        while self.word_is("and"):
            self.take()
            node = Logical("and", node, self.factor())
        return node

    def factor(self) -> Node:
        if self.word_is("not"):
            self.take()
            self.expect("(")
            inner = self.filter()
            self.expect(")")
            return Not(inner)
        kind, value = self.take()
        if value == "(":
            inner = self.filter()
            self.expect(")")
            return inner
        if kind != "word":
            raise _bad(self.text, f"an attribute expected, not {value}")
        attr = attr_of(value)
        token = self.peek()
        if token is not None and token[1] == "[":
            self.take()
            inner = self.filter()
            self.expect("]")
            return ValuePath(attr, inner)
        kind, op = self.take()
        op = op.lower()
        if op == "pr":
            return Present(attr)
        if op not in OPERATORS:
            raise _bad(self.text, f"{op!r} is not an operator (eq ne co sw ew gt ge lt le pr)")
        return Compare(attr, op, self.value())

    def value(self) -> Any:
        kind, text = self.take()
        if kind == "string":
            try:
                return orjson.loads(text)
            except orjson.JSONDecodeError:
                raise _bad(self.text, f"{text} is not a JSON string") from None
        if kind == "word" and text.lower() in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text.lower()]
        if kind == "word" and re.fullmatch(r"-?\d.*", text):
            return orjson.loads(text)
        raise _bad(self.text, f"{text} is not a value: quote strings")

    def done(self) -> None:
        if self.peek() is not None:
            raise _bad(self.text, f"{self.tokens[self.at][1]!r} is left over")


def parse_filter(text: str) -> Node:
    parser = _Parser(text)
    node = parser.filter()
    parser.done()
    return node


def parse_path(text: str) -> PatchPath:
    """A PATCH path: `active`, `name.givenName`, `members[value eq "x"]`, `emails[type eq "work"].value`."""
    m = re.fullmatch(r"\s*([^\[\]]+?)\s*(?:\[(.*)\](?:\.([A-Za-z_$][\w$-]*))?)?\s*", text or "", re.DOTALL)
    if m is None or not m.group(1):
        raise ScimError(400, N_('"{path}" is not an attribute path'), scim_type="invalidPath",
                        params={"path": (text or "")[:200]})
    attr = attr_of(m.group(1))
    where = parse_filter(m.group(2)) if m.group(2) is not None else None
    return PatchPath(attr, where, m.group(3))


# matching


def lookup(data: Any, name: str) -> Any:
    """`data[name]` with the name matched without regard to case (RFC 7643 2.1); None when absent."""
    if not isinstance(data, dict):
        return None
    if name in data:
        return data[name]
    folded = name.casefold()
    for key, value in data.items():
        if key.casefold() == folded:
            return value
    return None


def values_at(resource: dict[str, Any], attr: Attr) -> Iterator[Any]:
    """Every value at `attr`, multi-valued attributes flattened."""
    current: list[Any] = [lookup(resource, attr.urn) if attr.urn else resource]
    for name in attr.names:
        following: list[Any] = []
        for item in current:
            value = lookup(item, name)
            if isinstance(value, list):
                following.extend(value)
            elif value is not None:
                following.append(value)
        current = following
    yield from current


def _compare(actual: Any, op: str, wanted: Any, exact: bool) -> bool:
    if isinstance(actual, dict):  # a complex value compares by its "value" (RFC 7644 3.4.2.2)
        actual = actual.get("value")
    if isinstance(wanted, bool) or isinstance(actual, bool):
        if isinstance(actual, str) and actual.lower() in ("true", "false"):
            actual = actual.lower() == "true"
        answers: dict[str, bool] = {"eq": actual == wanted, "ne": actual != wanted}  # JSON values: a bool each
        return answers.get(op, False)
    if wanted is None:
        return {"eq": actual is None, "ne": actual is not None}.get(op, False)
    if isinstance(wanted, (int, float)) and isinstance(actual, (int, float)):
        a, w = float(actual), float(wanted)
    elif isinstance(actual, str) and isinstance(wanted, str):
        a, w = (actual, wanted) if exact else (actual.casefold(), wanted.casefold())  # type: ignore[assignment]
    else:
        return op == "ne"
    if op == "eq":
        return a == w
    if op == "ne":
        return a != w
    if op in ("co", "sw", "ew"):
        if not isinstance(a, str) or not isinstance(w, str):
            return False
        return {"co": w in a, "sw": a.startswith(w), "ew": a.endswith(w)}[op]
    return {"gt": a > w, "ge": a >= w, "lt": a < w, "le": a <= w}[op]


def matches(node: Node, resource: dict[str, Any], prefix: str = "") -> bool:
    if isinstance(node, Logical):
        if node.op == "and":
            return matches(node.left, resource, prefix) and matches(node.right, resource, prefix)
        return matches(node.left, resource, prefix) or matches(node.right, resource, prefix)
    if isinstance(node, Not):
        return not matches(node.inner, resource, prefix)
    if isinstance(node, ValuePath):
        inner_prefix = node.attr.key() + "."
        return any(isinstance(v, dict) and matches(node.inner, v, inner_prefix) for v in values_at(resource, node.attr))
    if isinstance(node, Present):
        return any(v not in ("", [], {}) for v in values_at(resource, node.attr))
    exact = (prefix + node.attr.key()) in _CASE_EXACT or node.attr.names[-1].casefold() in _CASE_EXACT
    values = list(values_at(resource, node.attr))
    if node.op == "ne":
        return not any(_compare(v, "eq", node.value, exact) for v in values)
    return any(_compare(v, node.op, node.value, exact) for v in values)


def mentions(node: Node | None, name: str) -> bool:
    """Whether the filter reads the top-level attribute `name` (so a costly one is loaded only then)."""
    if node is None:
        return False
    if isinstance(node, Logical):
        return mentions(node.left, name) or mentions(node.right, name)
    if isinstance(node, Not):
        return mentions(node.inner, name)
    return node.attr.names[0].casefold() == name.casefold()
