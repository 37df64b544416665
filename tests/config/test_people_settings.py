"""The settings for portal sign-in, sign-up and the portal itself (issue 13)."""

from __future__ import annotations

import pytest

from llmgw.config import ConfigError, ServerConfig, from_dict


def refused(data) -> str:
    with pytest.raises(ConfigError) as err:
        from_dict(ServerConfig, data)
    return str(err.value)


def test_by_default_nobody_signs_up_and_sessions_last_two_idle_hours_within_twelve():
    cfg = ServerConfig()
    assert cfg.auth.signup.domains == []
    assert cfg.auth.signup.project == "Default/default/default"
    assert (cfg.auth.session_idle, cfg.auth.session_max) == (2 * 3600, 12 * 3600)
    assert (cfg.auth.sign_in_per_account, cfg.auth.sign_in_per_address, cfg.auth.sign_in_window) == (10, 50, 900)
    assert (cfg.portal.language, cfg.portal.address) == ("en", "")


def test_sign_up_and_session_settings_are_read_from_the_file():
    cfg = from_dict(ServerConfig, {
        "auth": {"signup": {"domains": ["example.com"], "project": "Acme/all/chat"},
                 "session_idle": "30m", "session_max": "8h", "sign_in_per_account": 5},
        "portal": {"language": "tr", "address": "https://llm.example.com"},
    })
    assert cfg.auth.signup.domains == ["example.com"]
    assert cfg.auth.signup.project == "Acme/all/chat"
    assert (cfg.auth.session_idle, cfg.auth.session_max, cfg.auth.sign_in_per_account) == (1800, 8 * 3600, 5)
    assert (cfg.portal.language, cfg.portal.address) == ("tr", "https://llm.example.com")


def test_a_sign_up_domain_must_be_a_bare_lower_case_domain():
    assert refused({"auth": {"signup": {"domains": ["example.com", "@Example.com"]}}}) == (
        'auth.signup.domains[1]: "@Example.com" is not a domain in lower case, such as example.com'
    )


def test_the_sign_up_project_must_name_three_levels():
    assert refused({"auth": {"signup": {"project": "Acme/chat"}}}) == (
        'auth.signup.project: "Acme/chat" is not ORG/TEAM/PROJECT'
    )


def test_a_session_may_not_end_sooner_in_all_than_when_idle():
    assert refused({"auth": {"session_idle": "2h", "session_max": "1h"}}) == (
        "auth.session_max: must be at least session_idle (2h), got 1h"
    )


def test_throttles_must_allow_at_least_one_failure():
    assert refused({"auth": {"sign_in_per_address": 0}}) == "auth.sign_in_per_address: must be at least 1, got 0"


def test_the_portal_speaks_only_the_languages_it_has():
    assert refused({"portal": {"language": "de"}}) == (
        "portal.language: de is not one of the portal's languages (en, tr)"
    )
    assert refused({"portal": {"address": "llm.example.com"}}) == (
        "portal.address: llm.example.com must start with http:// or https://"
    )
