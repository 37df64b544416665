"""The cluster's trust in the store: one CA, join tokens used once, certificates and control planes' addresses."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from llmgw.store import ClusterCA, Conflict, ControlPlaneAddress, JoinToken, NodeCertificate


def token(secret: str, *, name: str | None = "gpu-1", created: float = 1000.0, expires: float = 4600.0,
          ident: str | None = None) -> JoinToken:
    return JoinToken(ident or f"join_{secret}", hashlib.sha256(secret.encode()).digest(), name,
                     created, expires, "admin")


async def test_a_new_store_has_no_cluster_ca(store):
    assert await store.get_cluster_ca() is None


async def test_the_first_ca_kept_is_the_one_every_control_plane_reads_back(store):
    first = ClusterCA("-----BEGIN CERTIFICATE-----\nfirst\n", b"\x00sealed-first", 10.0)
    second = ClusterCA("-----BEGIN CERTIFICATE-----\nsecond\n", b"\x01sealed-second", 11.0)
    assert await store.put_cluster_ca(first) == first
    assert await store.put_cluster_ca(second) == first
    assert await store.get_cluster_ca() == first


async def test_two_control_planes_keeping_a_ca_at_once_both_end_with_the_same_one(store_url):
    from llmgw.store import open_store

    a, b = await open_store(store_url), await open_store(store_url)
    try:
        kept = await asyncio.gather(
            a.put_cluster_ca(ClusterCA("a", b"a", 1.0)), b.put_cluster_ca(ClusterCA("b", b"b", 1.0)))
        assert kept[0] == kept[1]
    finally:
        await a.close()
        await b.close()


async def test_a_join_token_is_used_once_and_records_the_node_it_let_in(store):
    t = token("s1")
    await store.add_join_token(t)
    used = await store.use_join_token(t.digest, "node_aa", at=2000.0)
    assert used is not None and used.used_at == 2000.0 and used.node_id == "node_aa" and used.name == "gpu-1"
    assert await store.use_join_token(t.digest, "node_bb", at=2001.0) is None
    assert (await store.join_token(t.digest)).node_id == "node_aa"


async def test_a_join_token_past_its_expiry_is_not_used(store):
    t = token("s2", expires=1500.0)
    await store.add_join_token(t)
    assert await store.use_join_token(t.digest, "node_aa", at=1500.0) is None
    assert (await store.join_token(t.digest)).used_at is None


async def test_an_unknown_token_is_not_found(store):
    assert await store.join_token(hashlib.sha256(b"nope").digest()) is None
    assert await store.use_join_token(hashlib.sha256(b"nope").digest(), "node_aa", at=1.0) is None


async def test_two_nodes_presenting_one_token_at_once_let_in_exactly_one(store_url):
    from llmgw.store import open_store

    a, b = await open_store(store_url), await open_store(store_url)
    try:
        t = token("s3")
        await a.add_join_token(t)
        got = await asyncio.gather(a.use_join_token(t.digest, "node_a", at=2000.0),
                                   b.use_join_token(t.digest, "node_b", at=2000.0))
        assert sum(g is not None for g in got) == 1
    finally:
        await a.close()
        await b.close()


async def test_a_token_with_a_secret_already_kept_is_refused(store):
    await store.add_join_token(token("same", ident="join_1"))
    with pytest.raises(Conflict):
        await store.add_join_token(token("same", ident="join_2"))


async def test_tokens_that_ran_out_more_than_a_week_ago_are_forgotten_when_a_new_one_is_made(store):
    old = token("old", created=0.0, expires=100.0)
    await store.add_join_token(old)
    await store.add_join_token(token("new", created=100.0 + 7 * 86400 + 1, expires=200.0 + 7 * 86400))
    assert await store.join_token(old.digest) is None


async def test_node_certificates_are_listed_in_the_order_they_were_signed(store):
    second = NodeCertificate("02", "node_b", "b", "ff" * 32, 20.0, 30.0)
    first = NodeCertificate("01", "node_a", "a", "ee" * 32, 10.0, 30.0)
    await store.add_node_certificate(second)
    await store.add_node_certificate(first)
    assert await store.list_node_certificates() == [first, second]
    assert await store.list_node_certificates("node_b") == [second]
    with pytest.raises(Conflict):
        await store.add_node_certificate(first)


async def test_each_control_plane_has_one_agent_address_the_last_written_listed_first(store):
    await store.put_control_plane(ControlPlaneAddress("cp-a", "10.0.0.5:7443", 10.0))
    await store.put_control_plane(ControlPlaneAddress("cp-b", "10.0.0.6:7443", 20.0))
    await store.put_control_plane(ControlPlaneAddress("cp-a", "10.0.0.7:7443", 30.0))
    assert await store.list_control_planes() == [
        ControlPlaneAddress("cp-a", "10.0.0.7:7443", 30.0), ControlPlaneAddress("cp-b", "10.0.0.6:7443", 20.0)]


async def test_each_control_plane_keeps_the_version_it_last_started_on(store):
    await store.put_control_plane(ControlPlaneAddress("cp-a", "10.0.0.5:7443", 10.0, "0.1.0"))
    await store.put_control_plane(ControlPlaneAddress("cp-a", "10.0.0.5:7443", 20.0, "0.2.0"))
    assert [(cp.name, cp.version) for cp in await store.list_control_planes()] == [("cp-a", "0.2.0")]


async def test_the_upgrade_record_is_written_once_then_only_over_the_revision_read(store):
    assert await store.get_upgrade() is None
    first = await store.put_upgrade({"to": "0.2.0"}, 0, 10.0)
    assert first.revision == 1
    with pytest.raises(Conflict):
        await store.put_upgrade({"to": "0.3.0"}, 0, 11.0)
    second = await store.put_upgrade({"to": "0.2.0", "done": ["cp-a"]}, 1, 12.0)
    assert second.revision == 2
    with pytest.raises(Conflict):
        await store.put_upgrade({"to": "0.2.0", "done": []}, 1, 13.0)
    kept = await store.get_upgrade()
    assert kept is not None and (kept.revision, kept.doc) == (2, {"to": "0.2.0", "done": ["cp-a"]})
