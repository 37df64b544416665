"""`llmgw people` and `llmgw ctl tree` against a real `llmgw server`: what an administrator types and sees.

Sign-ins are made with llmgw.account.Sessions on the server's own store, as the portal makes them."""

from __future__ import annotations

import json

import pytest

from llmgw.account import AccountError, Sessions
from llmgw.config import AuthSettings
from llmgw.store import open_store
from tests.support.servers import llmgw

PASSWORD = "correct horse battery"


@pytest.fixture
async def sessions(shared_server):
    store = await open_store(shared_server.store)
    yield Sessions(store, lambda: AuthSettings())
    await store.close()


def people(server, *args: str, stdin: str | None = None):
    return llmgw("people", *args, "--admin", server.admin, "--token-file", server.token_file, stdin=stdin)


def add_with_password(server, email: str, *extra: str) -> dict:
    done = llmgw("people", "add", email, "--name", email.split("@")[0].title(), "--password-stdin", *extra,
                 "--json", "--admin", server.admin, "--token-file", server.token_file, stdin=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_person_added_gets_a_password_shown_once_and_is_listed_shown_and_audited_without_it(shared_server):
    done = people(shared_server, "add", "bea@example.com", "--name", "Bea Lee")

    assert done.returncode == 0, done.stderr
    password = next(line.split(": ", 1)[1] for line in done.stdout.splitlines() if line.startswith("password: "))
    assert "Shown once and kept nowhere" in done.stdout
    listed = people(shared_server, "list")
    assert listed.returncode == 0
    [row] = [line for line in listed.stdout.splitlines() if "bea@example.com" in line]
    assert "Bea Lee" in row and "member" in row and "must change password" in row
    shown = people(shared_server, "show", "bea@example.com")
    assert "email:" in shown.stdout and "Bea Lee" in shown.stdout
    audit = shared_server.ctl_json("ctl", "audit", "--limit", "100")
    assert any(e["action"] == "person.create" and e["after"]["email"] == "bea@example.com" for e in audit)
    for elsewhere in (listed.stdout, shown.stdout, str(audit), shared_server.output()):
        assert password not in elsewhere


def test_a_role_is_changed_by_name_and_a_wrong_one_is_a_usage_error(shared_server):
    add_with_password(shared_server, "cy@example.com")

    done = people(shared_server, "role", "cy@example.com", "operator")
    assert (done.returncode, done.stdout.strip()) == (0, "cy@example.com is now an operator")
    wrong = people(shared_server, "role", "cy@example.com", "owner")
    assert wrong.returncode == 2 and "invalid choice: 'owner'" in wrong.stderr
    unknown = people(shared_server, "role", "nobody@example.com", "admin")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == ("llmgw: no person nobody@example.com is known here; "
                                      "llmgw people list shows them")


def models_status(server, key: str) -> tuple[int, object]:
    return server.get("/v1/models", headers={"Authorization": f"Bearer {key}"})


async def test_a_suspended_persons_session_keys_and_sign_in_are_refused_until_lifted(shared_server, sessions):
    add_with_password(shared_server, "gus@example.com")
    key = shared_server.ctl_json("keys", "create", "gus-laptop", "--project", "Default/default/default",
                          "--person", "gus@example.com")["key"]
    assert models_status(shared_server, key)[0] == 200
    signed_in = await sessions.sign_in("gus@example.com", PASSWORD, address="192.0.2.9", agent="Firefox/140")
    assert await sessions.current(signed_in.token) is not None
    shown = people(shared_server, "show", "gus@example.com").stdout
    [row] = [line for line in shown.splitlines() if line.startswith("192.0.2.9")]
    assert "Firefox/140" in row

    done = people(shared_server, "suspend", "gus@example.com")

    assert done.returncode == 0, done.stderr
    assert "gus@example.com is suspended" in done.stdout
    assert await sessions.current(signed_in.token) is None
    with pytest.raises(AccountError, match="do not match an account here"):  # as a wrong password: no hint
        await sessions.sign_in("gus@example.com", PASSWORD, address="127.0.0.1")
    status, refused = models_status(shared_server, key)  # at once: the control plane asked forgets its cached keys
    assert (status, refused["error"]["message"]) == (
        401, "the person this API key belongs to is suspended; an administrator can lift it")
    assert models_status(shared_server, shared_server.first_key)[0] == 200  # the admin's key is untouched
    lifted = people(shared_server, "suspend", "gus@example.com", "--lift")
    assert lifted.stdout.strip() == "gus@example.com may sign in again"
    assert await sessions.sign_in("gus@example.com", PASSWORD, address="127.0.0.1")
    assert models_status(shared_server, key)[0] == 200


async def test_after_a_reset_the_old_password_no_longer_signs_in_and_the_new_one_must_be_changed(shared_server,
                                                                                                sessions):
    add_with_password(shared_server, "hal@example.com")
    before = await sessions.sign_in("hal@example.com", PASSWORD, address="127.0.0.1")

    done = people(shared_server, "reset-password", "hal@example.com")

    assert done.returncode == 0, done.stderr
    new = done.stdout.splitlines()[0]
    assert await sessions.current(before.token) is None
    with pytest.raises(AccountError, match="that e-mail and password do not match an account here"):
        await sessions.sign_in("hal@example.com", PASSWORD, address="127.0.0.1")
    after = await sessions.sign_in("hal@example.com", new, address="127.0.0.1")
    assert after.person.must_change_password
    assert new not in str(shared_server.ctl_json("ctl", "audit", "--limit", "100"))
    assert new not in shared_server.output()


def test_a_team_made_with_a_budget_shows_in_the_tree_and_people_join_and_leave_it(shared_server):
    assert shared_server.ctl("ctl", "tree", "add", "org", "Acme").returncode == 0
    made = shared_server.ctl("ctl", "tree", "add", "team", "Acme/Research", "--budget", "25.00")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("team Acme/Research is made (team_")
    assert "budget 25.00 a month" in made.stdout
    assert shared_server.ctl("ctl", "tree", "add", "project", "Acme/Research/search").returncode == 0

    tree = shared_server.ctl("ctl", "tree")
    [team_row] = [line for line in tree.stdout.splitlines() if line.strip().startswith("Acme/Research ")]
    assert "budget 25.00 a month" in team_row
    assert any(line.strip().startswith("Acme/Research/search") for line in tree.stdout.splitlines())
    missing = shared_server.ctl("ctl", "tree", "add", "team", "Nowhere/dev")
    assert missing.returncode == 1
    assert "there is no org Nowhere; make it first with llmgw ctl tree add org Nowhere" in missing.stderr

    add_with_password(shared_server, "ivy@example.com", "--member-of", "team:Acme/Research")
    left = people(shared_server, "leave", "ivy@example.com", "team:Acme/Research")
    assert left.stdout.strip() == "ivy@example.com belongs to no place now"
    joined = people(shared_server, "join", "ivy@example.com", "project:Acme/Research/search")
    assert joined.stdout.strip() == "ivy@example.com belongs to project:Acme/Research/search"
    audit = shared_server.ctl("ctl", "audit", "--limit", "2").stdout
    assert "joined project:Acme/Research/search" in audit and "left team:Acme/Research" in audit


def test_an_orgs_administrator_runs_llmgw_with_a_token_of_her_own_and_reaches_only_her_org(shared_server, tmp_path):
    for kind, path in (("org", "Tenco"), ("team", "Tenco/apps"), ("project", "Tenco/apps/site"), ("org", "Rival"),
                       ("team", "Rival/core"), ("project", "Rival/core/db")):
        assert shared_server.ctl("ctl", "tree", "add", kind, path).returncode == 0
    add_with_password(shared_server, "tess@tenco.example", "--member-of", "org:Tenco")
    add_with_password(shared_server, "rex@rival.example", "--member-of", "team:Rival/core")
    made = people(shared_server, "admin", "tess@tenco.example", "org:Tenco")
    assert made.stdout.strip() == "tess@tenco.example administers org:Tenco"
    token_file = tmp_path / "tess.token"
    given = people(shared_server, "token", "tess@tenco.example", "--output", str(token_file))
    assert given.returncode == 0 and f"is in {token_file}, readable only by you" in given.stdout
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"

    def as_tess(*args: str):
        return llmgw(*args, "--admin", shared_server.admin, "--token-file", str(token_file))

    key = as_tess("keys", "create", "site-ci", "--project", "Tenco/apps/site")
    assert key.returncode == 0, key.stderr
    listed = as_tess("people", "list").stdout
    assert "tess@tenco.example" in listed and "rex@rival.example" not in listed
    assert "Rival" not in as_tess("ctl", "tree").stdout
    refused = as_tess("keys", "create", "mine", "--project", "Rival/core/db")
    assert refused.returncode == 1 and "there is no project Rival/core/db" in refused.stderr
    status = as_tess("ctl", "status")
    assert status.returncode == 1 and "for a cluster administrator" in status.stderr
    audit = shared_server.ctl_json("ctl", "audit", "--limit", "20")
    [entry] = [e for e in audit if e["action"] == "key.create" and e["after"]["name"] == "site-ci"]
    assert entry["actor"].startswith("tess@tenco.example")
