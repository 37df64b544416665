"""PostgreSQL that is not there, or goes away and comes back."""

from __future__ import annotations

import socket

import pytest

from llmgw.store import StoreError, StoreUnavailable, open_store
from tests.support.pgcluster import PgCluster, free_port


@pytest.fixture(scope="module")
def own_cluster():
    """A cluster of this module's own, since its tests stop and start it."""
    try:
        cluster = PgCluster()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    yield cluster
    cluster.destroy()


async def test_a_store_where_nothing_listens_is_refused_with_a_sentence_and_no_password():
    port = free_port()
    url = f"postgresql://llmgw:hunter2secret@127.0.0.1:{port}/llmgw"

    with pytest.raises(StoreUnavailable) as refused:
        await open_store(url, timeout=1)

    assert str(refused.value) == (
        f"the store at postgresql://llmgw:***@127.0.0.1:{port}/llmgw refused the connection; "
        "is PostgreSQL running there?"
    )
    assert "hunter2secret" not in str(refused.value)


async def test_a_store_that_never_answers_is_given_up_on_after_the_timeout():
    # A socket that accepts connections (the kernel completes the handshake)
    # but never says a word: a server hung, or a partition that leaves TCP up.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        url = f"postgresql://llmgw:hunter2secret@127.0.0.1:{port}/llmgw"

        with pytest.raises(StoreUnavailable) as refused:
            await open_store(url, timeout=0.5)

    assert str(refused.value) == (
        f"the store at postgresql://llmgw:***@127.0.0.1:{port}/llmgw did not answer in 0.5 s; "
        "is PostgreSQL running there?"
    )


async def test_a_wrong_password_is_refused_with_what_to_check(own_cluster):
    url = own_cluster.url("postgres", password="wrong-password")

    with pytest.raises(StoreError) as refused:
        await open_store(url)

    assert not isinstance(refused.value, StoreUnavailable)
    assert "refused llmgw's sign-in" in str(refused.value)
    assert "check the user and password in its address" in str(refused.value)
    assert "wrong-password" not in str(refused.value)


async def test_a_database_that_does_not_exist_is_named_with_what_to_do(own_cluster):
    with pytest.raises(StoreError, match="has no such database .*; create it with createdb first"):
        await open_store(own_cluster.url("no_such_db"))


async def test_a_store_whose_server_stops_says_so_and_works_again_once_it_is_back(own_cluster):
    store = await open_store(own_cluster.create_database())
    try:
        await store.ensure_project("acme", "research", "chatbot")

        own_cluster.stop()
        try:
            with pytest.raises(StoreUnavailable) as lost:
                await store.ensure_project("acme", "research", "chatbot")
            assert "is PostgreSQL running there?" in str(lost.value)
            assert own_cluster.password not in str(lost.value)
            # Every kind of call, not only the first: none lets asyncpg's own
            # exceptions out while the server is away.
            for call in (store.ping, store.settings_version, store.get_settings,
                         lambda: store.try_lease("leader", "cp-1", "a", ttl=10)):
                with pytest.raises(StoreUnavailable):
                    await call()
        finally:
            own_cluster.start()

        path = await store.ensure_project("acme", "research", "chatbot")
        assert str(path) == "acme/research/chatbot"
        assert (await store.try_lease("leader", "cp-1", "a", ttl=10)).holder == "cp-1"
    finally:
        await store.close()


async def test_a_transaction_cut_off_by_the_server_stopping_is_a_store_unavailable(own_cluster):
    from llmgw.store import Usage

    store = await open_store(own_cluster.create_database())
    try:
        own_cluster.stop()
        try:
            with pytest.raises(StoreUnavailable):
                await store.add_usage([Usage(id="req_1", at=1.0, key_id="k", project_id=None, model="m")])
        finally:
            own_cluster.start()
        # The batch was not written, and a retry of it is.
        assert await store.usage_rows(since=0) == []
        await store.add_usage([Usage(id="req_1", at=1.0, key_id="k", project_id=None, model="m")])
        assert len(await store.usage_rows(since=0)) == 1
    finally:
        await store.close()
