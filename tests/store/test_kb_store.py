"""Knowledge bases in the store: files' passages written once, found by their words, and gone when removed."""

from __future__ import annotations

import struct
from dataclasses import replace

from llmgw.store import KbFile, KbGrant, NewPassage, StoredFile, VectorStore


def _vs(vs_id: str = "vs_1", project: str = "prj_a", at: float = 1.0) -> VectorStore:
    return VectorStore(vs_id, project, "key_1", f"docs {vs_id}", "minilm", 200, 40, at, at, {"team": "ops"})


def _kb_file(file_id: str, vs_id: str = "vs_1", at: float = 2.0) -> KbFile:
    return KbFile(vs_id, file_id, "key_1", "in_progress", at, 100, 200, 40)


def _vector(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


async def _filed(store, file_id: str, filename: str) -> None:
    await store.add_file(StoredFile(file_id, "prj_a", "key_1", "assistants", filename, 100, 1.0, "store"), b"x")


async def test_a_knowledge_base_reads_back_pages_newest_first_and_counts_its_files(store):
    await store.add_vector_store(_vs("vs_1", at=1.0))
    await store.add_vector_store(_vs("vs_2", at=2.0))
    await store.add_vector_store(_vs("vs_3", project="prj_b", at=3.0))

    assert await store.vector_store("vs_1") == _vs("vs_1", at=1.0)
    mine = [("project", "prj_a")]
    assert [v.id for v in await store.list_vector_stores(mine)] == ["vs_2", "vs_1"]
    assert [v.id for v in await store.list_vector_stores(mine, after="vs_2")] == ["vs_1"]
    assert [v.id for v in await store.list_vector_stores(mine, newest_first=False)] == ["vs_1", "vs_2"]
    renamed = await store.update_vector_store("vs_1", name="handbook", metadata={"k": "v"})
    assert (renamed.name, renamed.metadata) == ("handbook", {"k": "v"})

    assert await store.add_kb_file(_kb_file("file-a")) is True
    assert await store.add_kb_file(_kb_file("file-a")) is False
    await store.add_kb_file(_kb_file("file-b", at=3.0))
    await store.fail_kb_file("vs_1", "file-b", "failed", "unsupported_file", "no text in it")
    counts = (await store.vector_store_counts(["vs_1", "vs_2"]))["vs_1"]
    assert (counts.in_progress, counts.failed, counts.total, counts.usage_bytes) == (1, 1, 2, 0)
    failed = await store.kb_file("vs_1", "file-b")
    assert failed.status == "failed" and failed.last_error == {"code": "unsupported_file",
                                                               "message": "no text in it"}
    assert [f.file_id for f in await store.list_kb_files("vs_1")] == ["file-b", "file-a"]
    assert [f.file_id for f in await store.list_kb_files("vs_1", status="in_progress")] == ["file-a"]
    assert [f.file_id for f in await store.kb_files_in_progress()] == ["file-a"]


async def test_a_files_passages_are_found_by_their_words_and_vanish_with_the_file(store):
    await store.add_vector_store(_vs())
    await _filed(store, "file-a", "ports.md")
    await store.add_kb_file(_kb_file("file-a"))
    before = await store.kb_last_change()
    passages = [NewPassage(0, "The admin API listens on port 9090 of loopback.", _vector(1, 0)),
                NewPassage(1, "Usage rows are written in batches by a background task.", _vector(0, 1))]
    assert await store.finish_kb_file("vs_1", "file-a", passages) is True
    assert await store.finish_kb_file("vs_1", "file-a", passages) is False, "written once"

    done = await store.kb_file("vs_1", "file-a")
    assert (done.status, done.passages) == ("completed", 2)
    assert (await store.vector_store_counts(["vs_1"]))["vs_1"].usage_bytes == 100
    found = await store.search_words(["vs_1"], "Which port does the admin API listen on?", 10)
    assert len(found) == 1
    [passage] = await store.passages_by_id(found)
    assert (passage.filename, passage.ordinal, passage.file_id) == ("ports.md", 0, "file-a")
    assert "9090" in passage.text
    assert await store.search_words(["vs_other"], "port", 10) == []
    vectors = await store.passage_vectors("vs_1")
    assert sorted(v for _, _, v in vectors) == sorted([_vector(1, 0), _vector(0, 1)])
    [change] = await store.kb_changes(before)
    assert (change.vector_store_id, change.file_id, change.op) == ("vs_1", "file-a", "add")

    assert await store.remove_file_from_kbs("file-a") == ["vs_1"]
    assert await store.search_words(["vs_1"], "port", 10) == []
    assert await store.passages_by_id(found) == []
    assert await store.passage_vectors("vs_1") == []
    assert [c.op for c in await store.kb_changes(before)] == ["add", "remove"]


async def test_a_file_removed_while_it_was_embedded_leaves_no_passage(store):
    await store.add_vector_store(_vs())
    await store.add_kb_file(_kb_file("file-a"))
    assert await store.remove_kb_file("vs_1", "file-a") is True
    assert await store.finish_kb_file("vs_1", "file-a", [NewPassage(0, "late words", _vector(1))]) is False
    assert await store.search_words(["vs_1"], "late words", 10) == []


async def test_deleting_a_knowledge_base_deletes_its_files_places_and_passages(store):
    await store.add_vector_store(_vs())
    await store.add_kb_file(_kb_file("file-a"))
    await store.finish_kb_file("vs_1", "file-a", [NewPassage(0, "kept words", _vector(1))])
    before = await store.kb_last_change()
    assert await store.delete_vector_store("vs_1") is True
    assert await store.delete_vector_store("vs_1") is False
    assert await store.vector_store("vs_1") is None
    assert await store.kb_file("vs_1", "file-a") is None
    assert await store.search_words(["vs_1"], "kept", 10) == []
    assert [(c.op, c.file_id) for c in await store.kb_changes(before)] == [("drop", None)]


async def test_old_changes_are_pruned_but_the_last_which_a_new_index_starts_from(store):
    await store.add_vector_store(_vs())
    for n in range(3):
        await store.add_kb_file(_kb_file(f"file-{n}"))
        await store.finish_kb_file("vs_1", f"file-{n}", [NewPassage(0, f"words {n}", _vector(1))])
    last = await store.kb_last_change()
    assert await store.prune_kb_changes(before=10 ** 12) == 2
    assert await store.kb_last_change() == last
    assert [c.file_id for c in await store.kb_changes(0)] == ["file-2"]


async def test_a_key_sees_the_bases_of_its_project_team_and_org_and_those_given_to_them(store):
    await store.add_vector_store(_vs("vs_p", project="prj_a", at=1.0))
    await store.add_vector_store(replace(_vs("vs_t", project="team_a", at=2.0), owner_scope="team"))
    await store.add_vector_store(replace(_vs("vs_o", project="org_a", at=3.0), owner_scope="org"))
    await store.add_vector_store(_vs("vs_x", project="prj_x", at=4.0))
    await store.add_vector_store(_vs("vs_y", project="prj_y", at=5.0))
    await store.grant_kb(KbGrant("vs_x", "key", "key_a", "read"))
    await store.grant_kb(KbGrant("vs_x", "key", "key_a", "write"))  # replaces the first
    places = [("org", "org_a"), ("team", "team_a"), ("project", "prj_a"), ("key", "key_a")]
    assert [v.id for v in await store.list_vector_stores(places)] == ["vs_x", "vs_o", "vs_t", "vs_p"]
    assert await store.kb_grants("vs_x") == [KbGrant("vs_x", "key", "key_a", "write")]
    elsewhere = [("org", "org_b"), ("team", "team_b"), ("project", "prj_b"), ("key", "key_b")]
    assert await store.list_vector_stores(elsewhere) == []
    assert await store.revoke_kb("vs_x", "key", "key_a") is True
    assert await store.revoke_kb("vs_x", "key", "key_a") is False
    assert [v.id for v in await store.list_vector_stores(places)] == ["vs_o", "vs_t", "vs_p"]
    await store.grant_kb(KbGrant("vs_y", "team", "team_a", "read"))
    assert await store.delete_vector_store("vs_y") is True
    assert await store.kb_grants("vs_y") == []
