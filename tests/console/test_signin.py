"""Sign-in set up from the console: the directory tried from the control plane before it is kept (a real slapd)."""

from __future__ import annotations

import pytest

from tests.auth.ldapkit import start_slapd
from tests.support.slapd import PEOPLE, READER_DN, READER_PW

pytestmark = pytest.mark.slow  # a real slapd


@pytest.fixture(scope="module")
def slapd(tmp_path_factory):
    server = start_slapd(tmp_path_factory.mktemp("slapd"))
    yield server
    server.destroy()


def _directory_form(server, terminal, slapd, tmp_path, password: str, capture=None):
    ca = tmp_path / "corp-ca.pem"
    ca.write_text(slapd.ca_pem)
    screen = terminal().start("console", "--admin", server.admin, "--admin-token-file", server.token_file)
    screen.wait_for("Overview")
    screen.keys("4")
    screen.wait_for("directory ", "provisioning ")
    screen.keys("d")
    screen.wait_for("Directory (LDAP, Active Directory)")
    for value in (slapd.ldaps_url, PEOPLE, READER_DN, password, str(ca), "CORP", "ada"):
        screen.type(value)
        if value == "ada":
            filled = screen.wait_for("ada", "*" * len(password))
            assert password not in filled  # typed masked
            if capture is not None:
                capture(screen, "signin-form")
        screen.keys("Enter")  # the next field; on the last, done
    return screen


def _ldap(server) -> dict:
    return server.ctl_json("ctl", "config", "get", "auth.ldap")["value"]


def test_a_failed_directory_trial_shows_its_steps_and_keeps_nothing(server, terminal, slapd, tmp_path, capture):
    screen = _directory_form(server, terminal, slapd, tmp_path, "not-the-password")

    shown = screen.wait_for("FAIL", "nothing was kept: auth.ldap is as it was", timeout=60)
    assert "the trial failed at" in shown and "Traceback" not in shown
    assert "not-the-password" not in shown  # typed masked, never shown
    capture(screen, "signin-failed")
    assert _ldap(server)["urls"] == []
    # The password typed for the trial went into the store under a name of its own, and out again.
    assert server.ctl_json("ctl", "auth")["secrets"] == []
    assert "not-the-password" not in server.output()


def test_a_passing_directory_trial_is_kept_and_shown_on(server, terminal, slapd, tmp_path, capture):
    screen = _directory_form(server, terminal, slapd, tmp_path, READER_PW, capture)

    shown = screen.wait_for("every step passed", "kept: auth.ldap is in force", timeout=60)
    assert "FAIL" not in shown
    capture(screen, "signin-kept")
    kept = _ldap(server)
    assert kept["urls"] == [slapd.ldaps_url] and kept["base_dn"] == PEOPLE and kept["domain"] == "CORP"
    assert kept["bind_password_file"].startswith("store:auth/ldap-")
    screen.keys("Enter")  # any key closes the trial's box
    screen.wait_gone("Trial of the directory")
    on = screen.wait_for(f"on   {slapd.ldaps_url} under {PEOPLE}")
    assert READER_PW not in on
    capture(screen, "signin")


def test_keeping_the_directory_again_with_a_new_password_leaves_one_secret(server, terminal, slapd, tmp_path):
    first = _directory_form(server, terminal, slapd, tmp_path, READER_PW)
    first.wait_for("kept: auth.ldap is in force", timeout=60)
    kept_first = _ldap(server)["bind_password_file"]
    first.close()

    again = _directory_form(server, terminal, slapd, tmp_path, READER_PW)
    again.wait_for("kept: auth.ldap is in force, settings version 3", timeout=60)

    now = _ldap(server)["bind_password_file"]
    assert now != kept_first
    assert server.ctl_json("ctl", "auth")["secrets"] == [now]
