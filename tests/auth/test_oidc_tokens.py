"""The ID token's checks, with real JWTs signed by keys the test makes and served from a real aiohttp JWKS endpoint."""

from __future__ import annotations

import base64
import json
import logging
import time

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey

from llmgw.account import Accounts, Actor
from llmgw.auth import DirectoryAccounts, GroupMap
from llmgw.auth.oidc import OIDCClient, OIDCError, vouched
from llmgw.auth.oidcflow import FLOW_TTL, Flow
from llmgw.config.auth import OIDCSettings
from llmgw.trust import MasterKey

CLIENT = "llmgw"
NONCE = "the-nonce-of-this-sign-in"


class FakeProviderKeys:
    """Discovery and a key set on loopback, whose keys the test rotates; counts the key set's fetches."""

    def __init__(self):
        self.keys = [RSAKey.generate_key(2048, parameters={"kid": "k1"})]
        self.fetches = 0
        self.issuer = ""
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self.discovery)
        app.router.add_get("/jwks", self.jwks)
        self.server = TestServer(app, host="127.0.0.1")

    async def discovery(self, request):
        return web.json_response({"issuer": self.issuer, "authorization_endpoint": self.issuer + "/auth",
                                  "token_endpoint": self.issuer + "/token", "jwks_uri": self.issuer + "/jwks",
                                  "code_challenge_methods_supported": ["S256"]})

    async def jwks(self, request):
        self.fetches += 1
        return web.json_response({"keys": [k.as_dict(private=False) for k in self.keys]})

    def token(self, key: RSAKey | None = None, header: dict | None = None, **claims) -> str:
        now = int(time.time())
        body = {"iss": self.issuer, "aud": CLIENT, "sub": "u-ada", "exp": now + 300, "iat": now, "nonce": NONCE,
                "email": "ada@corp.example", "name": "Ada", "groups": ["llmgw-admins"]} | claims
        body = {k: v for k, v in body.items() if v is not None}
        signer = key or self.keys[0]
        return jwt.encode({"alg": "RS256", "kid": signer.kid} | (header or {}), body, signer)


@pytest.fixture
async def op():
    keys = FakeProviderKeys()
    await keys.server.start_server()
    keys.issuer = str(keys.server.make_url("")).rstrip("/")
    yield keys
    await keys.server.close()


def settings(op, **kw) -> OIDCSettings:
    return OIDCSettings(issuer=op.issuer, client_id=CLIENT, client_secret_file="/dev/null", **kw)


async def check(op, token: str, **kw):
    client = OIDCClient()
    s = settings(op, **kw)
    return await client.verify(s, await client.provider(s), token, nonce=NONCE)


async def refused(op, token: str) -> OIDCError:
    with pytest.raises(OIDCError) as e:
        await check(op, token)
    assert e.value.status == 401
    return e.value


async def test_a_token_signed_by_the_providers_key_for_this_client_gives_who_and_their_groups(op):
    claims = await check(op, op.token())
    who = vouched(settings(op), claims)
    assert (who.source, who.subject, who.email, who.name, who.groups) == (
        "oidc", f"{op.issuer}#u-ada", "ada@corp.example", "Ada", frozenset({"llmgw-admins"}))


async def test_a_token_signed_by_another_key_under_the_providers_kid_is_refused(op):
    forged = op.token(key=RSAKey.generate_key(2048, parameters={"kid": "k1"}))
    assert "signature does not match the provider's keys" in str(await refused(op, forged))


async def test_a_key_the_provider_rotated_in_is_fetched_once_more_and_accepted(op):
    client = OIDCClient()
    s = settings(op)
    provider = await client.provider(s)
    await client.verify(s, provider, op.token(), nonce=NONCE)
    op.keys.append(RSAKey.generate_key(2048, parameters={"kid": "k2"}))

    await client.verify(s, provider, op.token(key=op.keys[1]), nonce=NONCE)
    assert op.fetches == 2


async def test_a_kid_the_provider_does_not_publish_is_refused_after_one_more_fetch(op):
    stranger = RSAKey.generate_key(2048, parameters={"kid": "nobody"})
    assert "signed with a key the provider does not publish" in str(await refused(op, op.token(key=stranger)))
    assert op.fetches == 2


@pytest.mark.parametrize(("claims", "said"), [
    ({"aud": "another-app"}, 'the ID token is for another client ("another-app"), not "llmgw"'),
    ({"aud": [CLIENT, "another-app"], "azp": "another-app"}, 'the ID token was given to another client'),
    ({"iss": "https://evil.example"}, 'the ID token was issued by "https://evil.example"'),
    ({"exp": int(time.time()) - 3600}, "the ID token has expired"),
    ({"nonce": "another-sign-ins-nonce"}, "the ID token's nonce is not this sign-in's"),
    ({"nonce": None}, "the ID token's nonce is not this sign-in's"),
])
async def test_a_token_for_another_client_issuer_time_or_sign_in_is_refused_with_its_sentence(op, claims, said):
    assert said in str(await refused(op, op.token(**claims)))


async def test_a_token_expired_within_the_leeway_of_clocks_is_accepted(op):
    await check(op, op.token(exp=int(time.time()) - 30))


async def test_a_token_signed_with_the_client_secret_or_unsigned_is_refused(op):
    hmac_signed = jwt.encode({"alg": "HS256"}, {"iss": op.issuer, "aud": CLIENT}, OctKey.import_key("s" * 32))
    assert "signed with HS256, which this gateway does not accept" in str(await refused(op, hmac_signed))
    _, body, _ = op.token().split(".")
    header = base64.urlsafe_b64encode(json.dumps({"alg": "none"}).encode()).decode().rstrip("=")
    assert "signed with none, which this gateway does not accept" in str(await refused(op, f"{header}.{body}."))


async def test_entras_pointer_to_graph_keeps_the_persons_role_and_logs_what_to_choose(op, store, caplog):
    accounts = Accounts(store)
    directory = DirectoryAccounts(store, accounts.people, accounts.audit, break_glass=lambda: "admin@localhost")
    gmap = GroupMap(roles={"admin": ["llmgw-admins"]})
    s = settings(op, roles={"admin": ["llmgw-admins"]})
    first = vouched(s, await check(op, op.token(), roles={"admin": ["llmgw-admins"]}))
    person = await directory.account(first, gmap, create=True, actor=Actor("ada", "oidc"))
    assert person.role == "admin"

    pointer = op.token(groups=None, hasgroups=True,
                       _claim_names={"groups": "src1"},
                       _claim_sources={"src1": {"endpoint": "https://graph.microsoft.com/v1.0/users/x/getMemberObjects"}})
    with caplog.at_level(logging.ERROR, logger="llmgw.auth"):
        again = vouched(s, await check(op, pointer))
    assert again.groups is None
    assert "Groups assigned to the application" in caplog.text
    person = await directory.account(again, gmap, create=True, actor=Actor("ada", "oidc"))
    assert person.role == "admin"


async def test_entras_object_id_is_the_subject_because_its_sub_differs_per_application(op):
    claims = await check(op, op.token(oid="0b1c-oid", tid="tenant", email=None,
                                      preferred_username="ada@corp.example"))
    who = vouched(settings(op), claims)
    assert (who.subject, who.email, who.former_subject) == (f"{op.issuer}#0b1c-oid", "ada@corp.example", "0b1c-oid")
    assert who.email_verified is False  # preferred_username: nothing verifies it


@pytest.mark.parametrize(("claims", "named", "verified"), [
    ({"email_verified": True}, "email_verified", True),
    ({}, "email_verified", False),  # Entra ID sends none
    ({"email_verified": False}, "email_verified", False),
    ({"email_verified": "true"}, "email_verified", False),  # a string is not the boolean
    ({"email_verified": "false"}, "email_verified", False),
    ({"email_verified": 1}, "email_verified", False),
    ({"xms_edov": True}, "xms_edov", True),  # Entra's optional claim, named by the administrator
    ({"xms_edov": True, "email_verified": True}, "", False),  # tie by subject only
    ({"email": None, "preferred_username": "ada@corp.example", "email_verified": True}, "email_verified", False),
    ({"email": None, "upn": "ada@corp.example", "email_verified": True}, "email_verified", False),
])
async def test_only_the_boolean_true_of_the_named_claim_vouches_for_the_email(op, claims, named, verified):
    token = await check(op, op.token(**claims))
    who = vouched(settings(op, verified_email_claim=named), token)
    assert (who.email, who.email_verified) == ("ada@corp.example", verified)


async def test_a_token_without_the_groups_claim_is_in_no_group(op):
    claims = await check(op, op.token(groups=None))
    assert vouched(settings(op), claims).groups == frozenset()


async def test_discovery_from_a_provider_that_names_another_issuer_is_refused(op):
    client = OIDCClient()
    real = op.issuer
    op.issuer = "https://elsewhere.example"
    try:
        with pytest.raises(OIDCError) as e:
            await client.provider(OIDCSettings(issuer=real, client_id=CLIENT))
    finally:
        op.issuer = real
    assert 'the provider calls itself "https://elsewhere.example"' in str(e.value)


# The flow's cookie


def test_the_flows_cookie_opens_only_under_the_same_master_key_unaltered_and_in_time():
    key, other = MasterKey(b"k" * 32), MasterKey(b"o" * 32)
    flow = Flow.start(next_path="/keys", redirect_url="https://gw/login/oidc/callback", issuer="https://op",
                      client_id=CLIENT, now=1000.0)
    sealed = flow.seal(key)

    assert Flow.open(key, sealed, now=1001.0) == flow
    assert Flow.open(other, sealed, now=1001.0) is None  # another cluster's
    assert Flow.open(key, sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1], now=1001.0) is None
    assert Flow.open(key, sealed, now=1000.0 + FLOW_TTL + 1) is None
    assert Flow.open(key, "not a cookie", now=1001.0) is None
    assert flow.verifier not in sealed and flow.nonce not in sealed
