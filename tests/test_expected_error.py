"""An expected error keeps its untranslated template and parameters, and still reads as English."""

from __future__ import annotations

from llmgw.account import AccountError, LimitError, check_narrows
from llmgw.errors import N_, ExpectedError, explain
from llmgw.store import Limits


def test_an_error_with_params_reads_as_its_template_filled_in():
    error = ExpectedError(N_("no person {who} is known here"), params={"who": "ada@example.com"})
    assert str(error) == explain(error) == "no person ada@example.com is known here"
    assert (error.template, error.params) == ("no person {who} is known here", {"who": "ada@example.com"})


def test_a_plain_message_is_never_formatted_so_its_braces_stay():
    error = ExpectedError('the body {"model": 1} is not valid')
    assert str(error) == error.template == 'the body {"model": 1} is not valid'
    assert error.params == {}


def test_a_refused_limit_keeps_its_template_through_the_account_service():
    try:
        check_narrows(Limits("key", "k", rpm=100), [Limits("team", "t", rpm=10)])
    except LimitError as e:
        wrapped = AccountError(e.template, params=e.params)
    assert str(wrapped) == ("key rpm 100 is above its team's 10 requests a minute; "
                            "a level can only narrow what the level above it allows")
    assert wrapped.template.startswith("{scope} rpm {mine} is above")
