"""Filters on a file's attributes, in OpenAI's shape: which files of a knowledge base a search may answer from.

    {"type": "eq", "key": "region", "value": "eu"}
    {"type": "and", "filters": [{"type": "gte", "key": "year", "value": 2024},
                                {"type": "in", "key": "team", "value": ["ml", "ops"]}]}

A comparison is eq, ne, gt, gte, lt, lte, in or nin over a key of the
file's attributes (what `attributes` said when the file was added, and what
llmgw-kb sets: path, sha256, size); a compound is and or or over a list of
filters. A file without the key matches only ne and nin. gt, gte, lt and lte
compare numbers with numbers and strings with strings; across kinds they
match nothing. A filter is parsed once, checked whole, and refused in a
sentence naming where it is wrong (FilterError), never half applied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
MOST_DEPTH = 8
MOST_FILTERS = 64  # comparisons in one filter, all levels together

Filter = Callable[[Mapping[str, Any]], bool]
_MISSING = object()


class FilterError(ValueError):
    """A filter that is not one: the sentence says where (`at`, as filters.filters[1].value) and why."""

    def __init__(self, at: str, message: str):
        super().__init__(f"{at}: {message}")
        self.at = at


def parse_filter(value: Any, at: str = "filters") -> Filter:
    """The filter as a test of a file's attributes; FilterError for one that is not in OpenAI's shape."""
    count = [0]
    return _parse(value, at, 0, count)


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, bool, int, float))


def _parse(value: Any, at: str, depth: int, count: list[int]) -> Filter:
    if not isinstance(value, dict):
        raise FilterError(at, "a filter is an object with a type")
    kind = value.get("type")
    if kind in COMPOUNDS:
        parts = value.get("filters")
        if not isinstance(parts, list) or not parts:
            raise FilterError(at, f"an {kind} filter has filters, a list of one or more")
        if depth >= MOST_DEPTH:
            raise FilterError(at, f"filters nest at most {MOST_DEPTH} deep")
        tests = [_parse(part, f"{at}.filters[{n}]", depth + 1, count) for n, part in enumerate(parts)]
        if kind == "and":
            return lambda attributes: all(test(attributes) for test in tests)
        return lambda attributes: any(test(attributes) for test in tests)
    if kind not in COMPARISONS:
        raise FilterError(at, f"type is one of {', '.join(COMPARISONS + COMPOUNDS)}, got {kind!r}")
    count[0] += 1
    if count[0] > MOST_FILTERS:
        raise FilterError(at, f"a filter holds at most {MOST_FILTERS} comparisons")
    key, wanted = value.get("key"), value.get("value", _MISSING)
    if not isinstance(key, str) or not key:
        raise FilterError(at, "key is the name of an attribute, a string")
    if kind in ("in", "nin"):
        if not isinstance(wanted, list) or not wanted or not all(_scalar(v) for v in wanted):
            raise FilterError(at, f"an {kind} filter's value is a list of strings, numbers or booleans")
        members = list(wanted)
        if kind == "in":
            return lambda attributes: key in attributes and _among(attributes[key], members)
        return lambda attributes: key not in attributes or not _among(attributes[key], members)
    if not _scalar(wanted):
        raise FilterError(at, "value is a string, a number or a boolean")
    if kind == "eq":
        return lambda attributes: key in attributes and _same(attributes[key], wanted)
    if kind == "ne":
        return lambda attributes: key not in attributes or not _same(attributes[key], wanted)
    if isinstance(wanted, bool):
        raise FilterError(at, f"a {kind} filter compares numbers or strings, not true or false")
    order = {"gt": lambda a, b: a > b, "gte": lambda a, b: a >= b, "lt": lambda a, b: a < b,
             "lte": lambda a, b: a <= b}[kind]
    return lambda attributes: key in attributes and _comparable(attributes[key], wanted) and order(
        attributes[key], wanted)


def _same(have: Any, wanted: Any) -> bool:
    # True is not 1 here, though Python says so: an attribute is a boolean or a number, never both.
    return isinstance(have, bool) == isinstance(wanted, bool) and have == wanted


def _among(have: Any, members: list[Any]) -> bool:
    return any(_same(have, member) for member in members)


def _comparable(have: Any, wanted: Any) -> bool:
    if isinstance(have, bool):
        return False
    if isinstance(wanted, str):
        return isinstance(have, str)
    return isinstance(have, (int, float))
