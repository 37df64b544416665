"""The audit log: who changed what, newest first."""

from __future__ import annotations

from llmgw.store import AuditEntry


def entry(at: float, target: str = "key_1", **kw) -> AuditEntry:
    return AuditEntry(at=at, actor="ada@example.com", via="cli", action="key.revoke", target=target, **kw)


async def test_audit_entries_are_listed_newest_first_with_their_documents(store):
    await store.add_audit(entry(100.0, before={"revoked": False}, after={"revoked": True}))
    await store.add_audit(entry(300.0, target="prj_1"))
    await store.add_audit(entry(200.0, before=None, after=["a", 1]))

    listed = await store.list_audit()

    assert [e.at for e in listed] == [300.0, 200.0, 100.0]
    assert listed[2].before == {"revoked": False} and listed[2].after == {"revoked": True}
    assert listed[1].before is None and listed[1].after == ["a", 1]
    assert all(isinstance(e.id, int) for e in listed)
    assert listed[0].actor == "ada@example.com" and listed[0].via == "cli"


async def test_entries_at_one_moment_are_listed_in_the_reverse_of_their_writing(store):
    for n in range(3):
        await store.add_audit(entry(100.0, target=f"key_{n}"))
    assert [e.target for e in await store.list_audit()] == ["key_2", "key_1", "key_0"]


async def test_the_audit_log_is_filtered_by_time_and_target_and_limited(store):
    for n in range(10):
        await store.add_audit(entry(float(n), target="key_1" if n % 2 else "key_2"))

    assert [e.at for e in await store.list_audit(since=7.0)] == [9.0, 8.0, 7.0]
    assert [e.at for e in await store.list_audit(target="key_1", since=4.0)] == [9.0, 7.0, 5.0]
    assert [e.at for e in await store.list_audit(limit=2)] == [9.0, 8.0]


async def test_the_audit_log_is_filtered_by_who_and_what_and_paged_on(store):
    for n in range(6):
        await store.add_audit(AuditEntry(at=float(n), actor="ada@example.com" if n % 2 else "root", via="portal",
                                         action="person.create" if n < 3 else "key.revoke", target=f"t{n}"))

    assert [e.at for e in await store.list_audit(actor="ada@example.com")] == [5.0, 3.0, 1.0]
    assert [e.at for e in await store.list_audit(action="key.revoke", actor="root")] == [4.0]
    assert [e.at for e in await store.list_audit(limit=2, offset=2)] == [3.0, 2.0]
    assert await store.list_audit(limit=2, offset=6) == []
