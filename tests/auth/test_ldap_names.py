"""What a person types, and what the directory says back, read the same way every time (no server needed),
and the portal's form with a directory that does not answer."""

from __future__ import annotations

import uuid
from dataclasses import replace
from types import SimpleNamespace

from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import Accounts, Actor
from llmgw.auth import ldap
from llmgw.config import ClusterSettings
from llmgw.config.auth import LDAPSettings
from tests.portal.portalkit import PASSWORD, csrf_from, portal_app, sign_in
from tests.support.pgcluster import free_port


def test_each_form_of_a_name_becomes_its_own_filter_with_the_input_escaped():
    assert ldap.login_filter("ada", "CORP") == "(|(sAMAccountName=ada)(uid=ada))"
    assert ldap.login_filter("corp\\ada", "CORP") == "(|(sAMAccountName=ada)(uid=ada))"
    assert ldap.login_filter("ada@corp.example", "") == "(|(userPrincipalName=ada@corp.example)(mail=ada@corp.example))"
    assert ldap.login_filter("*)(uid=*", "") == "(|(sAMAccountName=\\2a\\29\\28uid=\\2a)(uid=\\2a\\29\\28uid=\\2a))"


def test_another_domain_or_an_empty_name_finds_nobody():
    assert ldap.login_filter("OTHER\\ada", "CORP") is None
    assert ldap.login_filter("CORP\\", "CORP") is None
    assert ldap.login_filter("  ", "") is None
    assert ldap.login_filter("ada\x00", "") is None


def test_an_active_directory_guid_is_read_and_searched_for_in_its_byte_order():
    guid = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
    found = ldap._found({"dn": "CN=Ada,OU=Staff,DC=corp,DC=example",
                         "raw_attributes": {"objectGUID": [guid.bytes_le], "userAccountControl": [b"514"],
                                            "mail": [b"ada@corp.example"], "displayName": [b"Ada"]}})
    assert found is not None and (found.subject, found.disabled) == (str(guid), True)  # 514 = 512 | ACCOUNTDISABLE

    reader = SimpleNamespace(ad=True)
    assert ldap.Reader._id_filter(reader, str(guid)) == ("(objectGUID=\\04\\03\\02\\01\\06\\05\\08\\07\\09\\0a\\0b"
                                                         "\\0c\\0d\\0e\\0f\\10)")


def test_only_a_permanent_ppolicy_lock_counts_as_disabled():
    def entry(**attrs):
        return {"dn": "uid=ada", "raw_attributes": {"entryUUID": [b"ea18e8e6-8430-1041-9aba-93debfb121b0"]} | attrs}

    assert ldap._found(entry(pwdAccountLockedTime=[b"000001010000Z"])).disabled
    assert not ldap._found(entry(pwdAccountLockedTime=[b"20261204131500Z"])).disabled  # failed guesses, times out
    assert ldap._found(entry(nsAccountLock=[b"TRUE"])).disabled


def _with_ldap(**kw) -> ClusterSettings:
    settings = ClusterSettings()
    block = LDAPSettings(urls=[f"ldaps://localhost:{free_port()}"], base_dn="ou=people,dc=corp,dc=example", **kw)
    return replace(settings, auth=replace(settings.auth, ldap=block))


async def test_the_form_names_the_directory_and_takes_a_user_name(store):
    async with TestClient(TestServer(portal_app(store, _with_ldap(label="Corp")))) as client:
        page = await (await client.get("/signin")).text()

    assert "E-mail or Corp user name" in page and 'name="email" type="text"' in page


async def test_a_local_account_with_a_password_signs_in_as_before_while_the_directory_is_down(store):
    await Accounts(store).people.add(Actor("root", "cli"), email="bob@example.com", name="Bob", password=PASSWORD)
    async with TestClient(TestServer(portal_app(store, _with_ldap()))) as client:
        answer = await sign_in(client, "bob@example.com")

    assert answer.status == 303


async def test_a_directory_login_while_no_server_answers_is_refused_with_a_sentence(store):
    async with TestClient(TestServer(portal_app(store, _with_ldap()))) as client:
        answer = await client.post("/signin", data={"_csrf": await csrf_from(client), "email": "ada",
                                                    "password": "ada-password-1"}, allow_redirects=False)

        assert answer.status == 503
        assert "the directory could not be reached to check your password" in await answer.text()
