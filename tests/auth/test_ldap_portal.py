"""Directory sign-in on a real `llmgw server`'s form, and its sync ending a session and an API key at once."""

from __future__ import annotations

import asyncio
import html
import json
import re

import aiohttp
import pytest

from tests.auth.ldapkit import bind_file, start_slapd
from tests.support.servers import Server
from tests.support.slapd import PEOPLE, READER_DN
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow  # a real slapd


@pytest.fixture
def slapd(tmp_path):
    server = start_slapd(tmp_path / "slapd")
    yield server
    server.destroy()


def ldap_block(slapd, tmp_path, **more) -> dict:
    return {"urls": [slapd.ldaps_url], "ca": slapd.ca_pem, "bind_dn": READER_DN,
            "bind_password_file": bind_file(tmp_path), "base_dn": PEOPLE, "domain": "CORP",
            "roles": {"admin": ["llmgw-admins"]},
            "memberships": {"llmgw-users": "project:Default/default/default"}} | more


@pytest.fixture
def gateway(tmp_path, slapd):
    server = Server(tmp_path, "cp1")
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.start()
    server.ctl_json("ctl", "config", "set", "auth.ldap", json.dumps(ldap_block(slapd, tmp_path)))
    wait_until(lambda: "E-mail or directory user name" in _page(server, "/signin"), 15,
               "the sign-in form offers the directory")
    yield server
    server.stop()


def _page(server, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(server.client_url + path, timeout=5) as r:
        return r.read().decode()


def _csrf(page: str) -> str:
    return re.search(r'name="_csrf" value="([^"]+)"', page).group(1)


async def sign_in(http: aiohttp.ClientSession, login: str, password: str) -> aiohttp.ClientResponse:
    async with http.get("/signin") as page:
        csrf = _csrf(await page.text())
    async with http.post("/signin", data={"_csrf": csrf, "email": login, "password": password, "next": "/profile"},
                         allow_redirects=False) as answer:
        await answer.read()
        return answer


def browser(server) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(server.client_url, cookie_jar=aiohttp.CookieJar(unsafe=True))


@pytest.mark.parametrize("login", ["ada", "CORP\\ada", "ada@corp.example"])
async def test_a_person_signs_in_on_the_portals_form_by_each_form_of_their_name(gateway, login):
    async with browser(gateway) as http:
        answer = await sign_in(http, login, "ada-password-1")
        assert answer.status == 303 and answer.headers["Location"].endswith("/profile")
        async with http.get("/profile") as profile:
            assert profile.status == 200 and "ada@corp.example" in await profile.text()
    ada = gateway.ctl_json("people", "show", "ada@corp.example")
    assert ada["role"] == "admin"  # platform, a group inside llmgw-admins


async def test_a_wrong_password_is_refused_with_the_form_kept_and_counts_toward_the_throttle(gateway):
    gateway.ctl_json("ctl", "config", "set", "auth.sign_in_per_account", "2")
    async with browser(gateway) as http:
        for _ in range(2):
            answer = await sign_in(http, "CORP\\ada", "wrong-password")
            assert answer.status == 401
        async with http.get("/signin") as page:
            csrf = _csrf(await page.text())
        async with http.post("/signin", data={"_csrf": csrf, "email": "CORP\\ada", "password": "ada-password-1"},
                             allow_redirects=False) as throttled:
            assert throttled.status == 429 and "too many failed sign-ins" in await throttled.text()


async def test_an_existing_account_with_the_same_mail_is_tied_only_once_the_directory_is_trusted_for_mail(gateway):
    made = gateway.ctl_json("people", "add", "bob@corp.example", "--name", "Bob")
    async with browser(gateway) as http:
        refused = await sign_in(http, "bob", "bob-password-1")
        assert refused.status == 409
        assert "llmgw people link bob@corp.example ldap" in html.unescape(await refused.text())
    assert gateway.ctl_json("people", "show", "bob@corp.example")["identities"] == []

    gateway.ctl_json("ctl", "config", "set", "auth.ldap.trust_email", "true")
    async with browser(gateway) as http:

        async def tied() -> bool:
            return (await sign_in(http, "bob", "bob-password-1")).status == 303

        for _ in range(100):  # until the settings poll has put trust_email in force
            if await tied():
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("bob was never tied with auth.ldap.trust_email on")
    bob = gateway.ctl_json("people", "show", "bob@corp.example")
    assert bob["id"] == made["id"] and bob["name"] == "Bob Babbage"


async def test_a_person_disabled_in_the_directory_loses_their_session_and_api_key_at_the_next_sync(
        gateway, slapd, tmp_path):
    # A long cache_ttl: the key can only be refused in time because the sync made the cache forget it.
    gateway.ctl_json("ctl", "config", "set", "auth.cache_ttl", "10m")
    async with browser(gateway) as ada_http, browser(gateway) as bob_http:
        assert (await sign_in(ada_http, "ada", "ada-password-1")).status == 303
        assert (await sign_in(bob_http, "bob", "bob-password-1")).status == 303
        async with bob_http.get("/keys") as page:
            keys_page = await page.text()
        project = re.search(r'<option value="([^"]+)">', keys_page).group(1)
        async with bob_http.post("/keys", data={"_csrf": _csrf(keys_page), "name": "sdk", "project": project}) as made:
            assert made.status == 201, await made.text()
            secret = re.search(r"sk-llmgw-[A-Za-z0-9]+", await made.text()).group(0)
        async with aiohttp.ClientSession(gateway.client_url) as client:

            async def key_status() -> tuple[int, str]:
                async with client.get("/v1/models", headers={"Authorization": f"Bearer {secret}"}) as r:
                    return r.status, await r.text()

            assert (await key_status())[0] == 200  # and now cached for ten minutes
            gateway.ctl_json("ctl", "config", "set", "auth.ldap.sync_interval", "1s")
            slapd.lock("bob")
            await _until(lambda: gateway.ctl_json("people", "show", "bob@corp.example")["state"] == "suspended",
                         "the sync suspended bob")
            status, said = await key_status()
            assert status == 401 and "the person this API key belongs to is suspended" in said
            async with bob_http.get("/profile", allow_redirects=False) as profile:
                assert profile.status in (302, 303) and "/signin" in profile.headers["Location"]
            async with ada_http.get("/profile") as profile:
                assert profile.status == 200  # one of two: the guard lets it through
            slapd.unlock("bob")
            await _until(lambda: gateway.ctl_json("people", "show", "bob@corp.example")["state"] == "active",
                         "the sync reinstated bob")
            assert (await key_status())[0] == 200
    assert "bob-password-1" not in gateway.output() and "ada-password-1" not in gateway.output()


async def _until(condition, what: str, timeout: float = 30) -> None:
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout} s for this, which never happened: {what}"
        await asyncio.sleep(0.1)
