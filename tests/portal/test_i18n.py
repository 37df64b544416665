"""The portal's languages: which one a reader gets, and sentences, numbers and dates in it."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import AccountError
from llmgw.errors import N_, ExpectedError
from llmgw.portal import i18n
from tests.portal.portalkit import portal_app


def test_a_turkish_browser_gets_turkish():
    assert i18n.choose("tr-TR,tr;q=0.9", None, "en") == "tr"
    assert i18n.choose("de-DE,de;q=0.9,tr;q=0.8,en;q=0.7", None, "en") == "tr"


def test_a_persons_own_choice_beats_the_browsers():
    assert i18n.choose("tr-TR,tr;q=0.9", "en", "tr") == "en"


def test_a_browser_asking_for_neither_gets_the_sites_default():
    assert i18n.choose("de-DE,fr;q=0.5", None, "tr") == "tr"
    assert i18n.choose("", None, "en") == "en"
    assert i18n.choose("tr;q=0, en", None, "tr") == "en"  # q=0 is "not this one"


def test_percentages_money_and_numbers_in_each_language():
    assert i18n.percent("tr", .93) == "%93"
    assert i18n.percent("en", .93) == "93%"
    assert i18n.number("tr", 1234567.5) == "1.234.567,5"
    assert i18n.money("en", 12_500_000) == "12.50"
    assert i18n.money("tr", 12_500_000) == "12,50"
    assert i18n.money("en", 1234) == "0.001234"


def test_dates_are_in_utc_and_say_so():
    assert i18n.date("tr", 1_000_000_000) == "9 Eyl 2001"
    assert i18n.datetime("en", 1_000_000_000).endswith("UTC")


def test_a_refusal_is_said_in_the_readers_language_with_its_values():
    error = AccountError(N_("too many failed sign-ins; wait {minutes} minutes and try again, "
                            "or ask an administrator to reset your password"), 429, params={"minutes": 15})

    assert i18n.say("tr", error).startswith("çok fazla başarısız giriş denemesi; 15 dakika bekleyip")
    assert i18n.say("en", error) == str(error)


def test_a_sentence_without_a_translation_is_shown_in_english():
    assert i18n.gettext("tr", "no one translated this") == "no one translated this"
    assert i18n.say("tr", ExpectedError("a plain {brace} message")) == "a plain {brace} message"
    assert i18n.say("tr", ValueError("a bug's text")) == "a bug's text"


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
async def test_the_sign_in_page_speaks_turkish_to_a_turkish_browser(store):
    async with TestClient(TestServer(portal_app(store))) as client:
        page = await (await client.get("/signin", headers={"Accept-Language": "tr-TR,tr;q=0.9"})).text()

    assert '<html lang="tr">' in page and "<h1>Giriş yap</h1>" in page


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_money_reads_exactly_as_babel_writes_it_in_each_language(lang):
    from babel import numbers

    from llmgw.portal import i18n

    amounts = [0, 1, 10, 999, 5_000, 10_000, 123_456, 1_000_000, 1_234_567, 12_345_678_901, -2_500_000,
               -1, 999_999_999_999_999, 40_000_000, 7_000_010]
    for micros in amounts:
        babel = numbers.format_decimal(micros / 1_000_000, format="#,##0.00####", locale=lang)
        assert i18n.money(lang, micros) == babel, micros
