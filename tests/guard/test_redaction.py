"""Placeholders: one per value for the whole request, and the values put back in the answer, streamed too."""

from __future__ import annotations

import json

from llmgw.guard.detectors import Match
from llmgw.guard.redact import Redactor, StreamRestorer


def test_the_same_value_is_always_the_same_placeholder_and_another_value_the_next_number():
    r = Redactor()
    assert r.placeholder("email", "ayse@example.com") == "[EMAIL_1]"
    assert r.placeholder("email", "mehmet@example.com") == "[EMAIL_2]"
    assert r.placeholder("email", "Ayse@Example.com") == "[EMAIL_1]"
    assert r.placeholder("phone", "+90 532 123 45 67") == "[PHONE_1]"
    assert r.placeholder("phone", "+905321234567") == "[PHONE_1]"
    assert r.placeholder("cards", "4111 1111 1111 1111") == "[CARD_1]"
    assert r.placeholder("national_id", "10000000146") == "[NATIONAL_ID_1]"
    assert r.placeholder("secrets", "hunter2") == "[SECRET_1]"


def test_applying_matches_replaces_each_span_and_keeps_the_rest():
    r = Redactor()
    text = "mail a@b.io and a@b.io"
    matches = [Match("email", "pii:email", 5, 11, "a@b.io"), Match("email", "pii:email", 16, 22, "a@b.io")]
    assert r.apply(text, matches) == "mail [EMAIL_1] and [EMAIL_1]"
    assert r.restore("to [EMAIL_1]!") == "to a@b.io!"


def test_a_placeholder_the_request_never_had_is_left_as_it_is():
    r = Redactor()
    r.placeholder("person", "Ayşe Yılmaz")
    assert r.restore("[PERSON_1] and [PERSON_2] and [link]") == "Ayşe Yılmaz and [PERSON_2] and [link]"


def test_a_placeholder_split_across_stream_events_is_held_until_whole():
    r = Redactor()
    r.placeholder("email", "ayse@example.com")
    s = StreamRestorer(r)
    assert s.feed("write to [EMA") == "write to "
    assert s.feed("IL_1] ok") == "ayse@example.com ok"
    assert s.flush() == ""


def test_a_bracket_that_cannot_become_a_placeholder_is_released_at_once():
    r = Redactor()
    r.placeholder("email", "ayse@example.com")
    s = StreamRestorer(r)
    assert s.feed("see [") == "see "
    assert s.feed("note 1] and [E") == "[note 1] and "
    assert s.feed("MAIL_2]") == "[EMAIL_2]"
    assert s.feed("[EMAIL_1") == ""
    assert s.flush() == "[EMAIL_1"


def test_a_value_restored_into_tool_call_arguments_is_json_escaped():
    r = Redactor()
    r.placeholder("person", 'Ali "the boss" Veli\\')
    restored = r.restore_json_fragment('{"to": "[PERSON_1]"}')
    assert json.loads(restored) == {"to": 'Ali "the boss" Veli\\'}
    s = StreamRestorer(r, json_fragment=True)
    parts = [s.feed('{"to": "[PER'), s.feed('SON_1]"}'), s.flush()]
    assert json.loads("".join(parts)) == {"to": 'Ali "the boss" Veli\\'}


def test_a_redactor_never_shows_its_values():
    r = Redactor()
    r.placeholder("email", "ayse@example.com")
    assert "ayse" not in repr(r) and "ayse" not in str(r)
