"""Filters on a file's attributes, in OpenAI's shape: what each keeps, and the sentence for one that is not one."""

from __future__ import annotations

import pytest

from llmgw.kb import FilterError, parse_filter

EU_2024 = {"region": "eu", "year": 2024, "public": True, "team": "ml"}
US_2023 = {"region": "us", "year": 2023, "public": False}


def keeps(value, *attributes):
    test = parse_filter(value)
    return [test(a) for a in attributes]


def test_each_comparison_keeps_what_it_says():
    assert keeps({"type": "eq", "key": "region", "value": "eu"}, EU_2024, US_2023) == [True, False]
    assert keeps({"type": "ne", "key": "region", "value": "eu"}, EU_2024, US_2023) == [False, True]
    assert keeps({"type": "gt", "key": "year", "value": 2023}, EU_2024, US_2023) == [True, False]
    assert keeps({"type": "gte", "key": "year", "value": 2023}, EU_2024, US_2023) == [True, True]
    assert keeps({"type": "lt", "key": "year", "value": 2024}, EU_2024, US_2023) == [False, True]
    assert keeps({"type": "lte", "key": "year", "value": 2023.5}, EU_2024, US_2023) == [False, True]
    assert keeps({"type": "in", "key": "region", "value": ["eu", "uk"]}, EU_2024, US_2023) == [True, False]
    assert keeps({"type": "nin", "key": "region", "value": ["eu", "uk"]}, EU_2024, US_2023) == [False, True]
    assert keeps({"type": "gt", "key": "region", "value": "f"}, EU_2024, US_2023) == [False, True]


def test_and_and_or_combine_filters_nested():
    both = {"type": "and", "filters": [{"type": "eq", "key": "region", "value": "eu"},
                                       {"type": "or", "filters": [{"type": "eq", "key": "public", "value": True},
                                                                  {"type": "gte", "key": "year", "value": 2030}]}]}
    assert keeps(both, EU_2024, US_2023, {**EU_2024, "public": False}) == [True, False, False]


def test_a_file_without_the_key_matches_only_ne_and_nin():
    assert keeps({"type": "eq", "key": "team", "value": "ml"}, EU_2024, US_2023) == [True, False]
    assert keeps({"type": "ne", "key": "team", "value": "ml"}, EU_2024, US_2023) == [False, True]
    assert keeps({"type": "nin", "key": "team", "value": ["ml"]}, US_2023) == [True]
    assert keeps({"type": "lt", "key": "team", "value": "zz"}, US_2023) == [False]


def test_true_is_not_one_and_numbers_are_not_strings():
    assert keeps({"type": "eq", "key": "public", "value": 1}, EU_2024) == [False]
    assert keeps({"type": "eq", "key": "year", "value": "2024"}, EU_2024) == [False]
    assert keeps({"type": "gt", "key": "year", "value": "2000"}, EU_2024) == [False]


@pytest.mark.parametrize(("value", "said"), [
    ({"type": "like", "key": "a", "value": "b"}, "filters: type is one of eq, ne, gt, gte, lt, lte, in, nin, and, or"),
    ({"type": "eq", "value": "b"}, "filters: key is the name of an attribute"),
    ({"type": "eq", "key": "a", "value": {"b": 1}}, "filters: value is a string, a number or a boolean"),
    ({"type": "in", "key": "a", "value": "b"}, "filters: an in filter's value is a list"),
    ({"type": "gt", "key": "a", "value": True}, "filters: a gt filter compares numbers or strings"),
    ({"type": "and", "filters": []}, "filters: an and filter has filters, a list of one or more"),
    ({"type": "or", "filters": [{"type": "eq", "key": "a", "value": 1}, "b"]},
     "filters.filters[1]: a filter is an object with a type"),
    ([], "filters: a filter is an object with a type"),
])
def test_a_filter_that_is_not_one_is_refused_saying_where(value, said):
    with pytest.raises(FilterError) as refused:
        parse_filter(value)
    assert str(refused.value).startswith(said), str(refused.value)


def test_a_filter_too_deep_or_too_large_is_refused():
    deep = {"type": "eq", "key": "a", "value": 1}
    for _ in range(9):
        deep = {"type": "and", "filters": [deep]}
    with pytest.raises(FilterError, match="nest at most 8 deep"):
        parse_filter(deep)
    wide = {"type": "or", "filters": [{"type": "eq", "key": "a", "value": n} for n in range(65)]}
    with pytest.raises(FilterError, match="at most 64 comparisons"):
        parse_filter(wide)
