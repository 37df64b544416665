"""Key secrets, money and the narrowing of limits down the tree."""

from __future__ import annotations

import pytest

from llmgw.account.keys import digest, looks_like_key, new_secret, shown_prefix
from llmgw.account.limits import LimitError, check_narrows, effective, format_money, parse_money
from llmgw.account.passwords import check_password, hash_password
from llmgw.account.tree import TreeError, parse_project_path
from llmgw.store import Limits


def test_a_new_key_is_well_formed_unique_and_only_its_prefix_is_shown():
    keys = {new_secret() for _ in range(100)}
    assert len(keys) == 100
    key = keys.pop()
    assert looks_like_key(key) and len(key) == len("sk-llmgw-") + 43
    assert shown_prefix(key) == key[:15]
    assert len(digest(key)) == 32
    assert not looks_like_key(key + "x") and not looks_like_key("sk-llmgw-short")


def test_money_is_whole_micro_units_and_prints_back_as_written():
    assert parse_money("12.50") == 12_500_000
    assert parse_money("0.000001") == 1
    assert format_money(12_500_000) == "12.50" and format_money(1) == "0.000001"
    with pytest.raises(LimitError, match="more than six decimal places"):
        parse_money("0.0000001")
    with pytest.raises(LimitError, match="like 12.50"):
        parse_money("lots")


def test_the_smallest_figure_and_the_models_every_level_allows_apply():
    got = effective([Limits("org", "o", rpm=100, models=["a", "b"]), None,
                     Limits("project", "p", rpm=50, models=["b", "c"]), Limits("key", "k", tpm=10)])
    assert got.rpm == 50 and got.rpm_from == "project" and got.tpm == 10
    assert got.models == frozenset({"b"})


def test_a_level_above_its_parent_is_refused_with_both_figures():
    with pytest.raises(LimitError, match="key rpm 200 is above its team's 100"):
        check_narrows(Limits("key", "k", rpm=200), [None, Limits("team", "t", rpm=100)])
    # A daily budget under a monthly one is different money over different time.
    check_narrows(Limits("key", "k", budget_micros=10, period="day"),
                  [Limits("org", "o", budget_micros=5, period="month")])


def test_a_project_path_must_have_three_names():
    assert parse_project_path("Demo/dev/app") == ("Demo", "dev", "app")
    with pytest.raises(TreeError, match="write ORG/TEAM/PROJECT"):
        parse_project_path("Demo/app")
    with pytest.raises(TreeError, match="cannot name a team"):
        parse_project_path("Demo/../app")


def test_a_password_checks_against_its_hash_and_nothing_else():
    stored = hash_password("correct horse")
    assert check_password("correct horse", stored)
    assert not check_password("correct hors", stored)
    assert "correct" not in stored
