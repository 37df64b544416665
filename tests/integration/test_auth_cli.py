"""`llmgw ctl auth` against a real control plane: secrets kept from stdin, a block tried and refused before it
is kept, and how people sign in shown without a secret in it."""

from __future__ import annotations

import json

from tests.support.pgcluster import free_port
from tests.support.servers import llmgw

BIND_PASSWORD = "Bind-pa55word-never-shown"


def closed_port() -> int:
    """A loopback port nothing listens on, leased so no other test starts a listener there."""
    return free_port()


def ctl_stdin(server, *args: str, stdin: str):
    return llmgw(*args, "--admin", server.admin, "--token-file", server.token_file, stdin=stdin)


def test_a_secret_piped_to_ctl_auth_secret_set_is_kept_and_only_its_reference_is_printed(server):
    done = ctl_stdin(server, "ctl", "auth", "secret", "set", "ldap-bind", stdin=BIND_PASSWORD + "\n")

    assert done.returncode == 0, done.stderr
    assert "store:auth/ldap-bind" in done.stdout and BIND_PASSWORD not in done.stdout + done.stderr
    shown = server.ctl("ctl", "auth")
    assert shown.returncode == 0, shown.stderr
    assert "store:auth/ldap-bind" in shown.stdout and BIND_PASSWORD not in shown.stdout
    assert BIND_PASSWORD not in server.output()


def test_a_directory_that_does_not_answer_is_tried_shown_failing_and_not_kept(server, tmp_path):
    ctl_stdin(server, "ctl", "auth", "secret", "set", "ldap-bind", stdin=BIND_PASSWORD + "\n")
    block = tmp_path / "ldap.yaml"
    block.write_text(f"urls: [ldaps://127.0.0.1:{closed_port()}]\n"
                     "base_dn: ou=people,dc=corp,dc=example\n"
                     "bind_dn: cn=llmgw,dc=corp,dc=example\n"
                     "bind_password_file: store:auth/ldap-bind\n"
                     "timeout: 2s\n")

    tried = server.ctl("ctl", "auth", "test", "ldap", "--file", str(block))
    kept = server.ctl("ctl", "auth", "keep", "ldap", "--file", str(block))

    assert tried.returncode == 1 and "FAIL" in tried.stdout and "the trial failed at" in tried.stdout
    assert kept.returncode == 1 and "nothing was kept" in kept.stdout
    ldap = json.loads(server.ctl("ctl", "config", "get", "auth.ldap", "--json").stdout)
    assert ldap["value"]["urls"] == []


def test_a_block_file_that_breaks_a_rule_is_refused_with_the_key_at_fault(server, tmp_path):
    block = tmp_path / "ldap.yaml"
    block.write_text("auth:\n  ldap:\n    urls: [ldap://127.0.0.1:389]\n    base_dn: dc=corp,dc=example\n")

    done = server.ctl("ctl", "auth", "test", "ldap", "--file", str(block))

    assert done.returncode != 0
    assert "auth.ldap.urls[0]" in done.stderr and "plaintext" in done.stderr and "Traceback" not in done.stderr
