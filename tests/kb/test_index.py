"""A control plane's vectors: loaded when first searched, kept current from the store's changes."""

from __future__ import annotations

import asyncio
import struct

from llmgw.kb import HYBRID, VECTOR, KbIndex, kept_by, parse_filter, retrieval, search
from llmgw.store import KbFile, NewPassage, StoredFile, VectorStore


def _v(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def _axis(n: int, dimensions: int = 13) -> bytes:
    return _v(*(1.0 if i == n else 0.0 for i in range(dimensions)))


async def _base(store, vs_id: str = "vs_1") -> None:
    await store.add_vector_store(VectorStore(vs_id, "prj_a", "key_1", "docs", "m", 200, 40, 1.0, 1.0))


async def _file(store, file_id: str, passages: list[tuple[str, bytes]], vs_id: str = "vs_1") -> None:
    await store.add_file(StoredFile(file_id, "prj_a", "key_1", "assistants", f"{file_id}.md", 10, 1.0, "store"),
                         b"x")
    await store.add_kb_file(KbFile(vs_id, file_id, "key_1", "in_progress", 2.0, 10, 200, 40))
    await store.finish_kb_file(vs_id, file_id, [NewPassage(n, text, vec) for n, (text, vec) in enumerate(passages)])


async def test_a_file_added_through_another_control_plane_is_searched_here_after_its_change_is_read(store):
    here, there = KbIndex(store), KbIndex(store)
    try:
        await _base(store)
        await _file(store, "file-a", [("north", _v(1, 0, 0)), ("east", _v(0, 1, 0))])
        assert [pid for pid, _ in await here.search("vs_1", _v(1, 0.1, 0), 5)][:1] == \
            [pid for pid, _ in await there.search("vs_1", _v(1, 0.1, 0), 5)][:1]

        await _file(store, "file-b", [("up", _v(0, 0, 1))])
        await here.catch_up()
        hits = await search(store, here, ["vs_1"], "which way", _v(0, 0.1, 1), 1, VECTOR)
        assert [h.passage.text for h in hits] == ["up"]

        await store.remove_kb_file("vs_1", "file-b")
        # Before this plane has read the change, the store's own copy keeps the removed passage out.
        hits = await search(store, here, ["vs_1"], "which way", _v(0, 0.1, 1), 3, VECTOR)
        assert "up" not in [h.passage.text for h in hits]
        await here.catch_up()
        assert here.passages("vs_1") == 2
    finally:
        await here.stop()
        await there.stop()


async def test_a_dropped_knowledge_base_is_let_go_and_words_still_find_passages_without_a_vector(store):
    index = KbIndex(store)
    try:
        await _base(store)
        await _file(store, "file-a", [("The admin API listens on port 9090", _v(1, 0)), ("other", _v(0, 1))])
        hits = await search(store, index, ["vs_1"], "admin port", None, 5, HYBRID)
        assert [h.passage.text for h in hits] == ["The admin API listens on port 9090"]
        await index.search("vs_1", _v(1, 0), 1)
        assert index.holds("vs_1")
        await store.delete_vector_store("vs_1")
        await index.catch_up()
        assert not index.holds("vs_1")
        assert await search(store, index, ["vs_1"], "admin port", _v(1, 0), 5) == []
    finally:
        await index.stop()


async def test_a_base_past_the_exact_size_is_searched_by_words_until_its_graph_is_built_then_by_the_graph(store):
    index = KbIndex(store, exact_below=8)
    try:
        await _base(store)
        # 12 passages, each on an axis of its own: its own nearest, equally far from every other.
        rows = [(f"passage {n}", _axis(n)) for n in range(12)]
        await _file(store, "file-a", rows)
        assert await index.search("vs_1", rows[3][1], 3) == []
        assert index.building("vs_1")
        while index.building("vs_1"):
            await asyncio.sleep(0.01)
        assert "vs_1" in index.near and index.passages("vs_1") == 12
        hits = await search(store, index, ["vs_1"], "which", rows[3][1], 1, VECTOR)
        assert hits[0].passage.vector_store_id == "vs_1"
        [(nearest, distance)] = await index.search("vs_1", rows[3][1], 1)
        assert distance < 1e-6

        await _file(store, "file-b", [("the new one", _axis(12))])
        await index.catch_up()
        assert index.passages("vs_1") == 13
        await store.remove_kb_file("vs_1", "file-a")
        await index.catch_up()
        assert index.passages("vs_1") == 1
        assert [h.passage.text for h in await search(store, index, ["vs_1"], "x", _axis(12), 5,
                                                     VECTOR)] == ["the new one"]
    finally:
        await index.stop()


class _Counting:
    """The real store, counting the calls that read its knowledge-base changes."""

    def __init__(self, store):
        self.store, self.reads = store, 0

    def __getattr__(self, name):
        if name in ("kb_changes", "kb_last_change"):
            self.reads += 1
        return getattr(self.store, name)


async def test_an_index_holding_no_base_asks_the_store_nothing_and_still_misses_no_change(store):
    counting = _Counting(store)
    index = KbIndex(counting)
    try:
        await _base(store)
        await _file(store, "file-a", [("north", _v(1, 0, 0))])
        for _ in range(3):
            await index.follow_once()
        assert counting.reads == 0, "no base held: no question for the store"

        assert [h.passage.text for h in await search(store, index, ["vs_1"], "which way", _v(1, 0, 0), 1, VECTOR)] \
            == ["north"]
        await _file(store, "file-b", [("up", _v(0, 0, 1))])
        await index.follow_once()
        assert counting.reads > 0 and index.passages("vs_1") == 2, "a base held: its changes are read"

        await store.delete_vector_store("vs_1")
        await index.follow_once()
        settled = counting.reads
        await index.follow_once()
        assert counting.reads == settled, "its base dropped, the index is idle again"
    finally:
        await index.stop()


async def _only(store, test, vs_ids=("vs_1",)):
    return await kept_by(store, list(vs_ids), test)


async def test_a_filter_keeps_the_nearest_of_its_files_out_of_a_graph_and_one_by_one(store, monkeypatch):
    index = KbIndex(store, exact_below=8)
    try:
        await _base(store)
        await _file(store, "file-a", [(f"a {n}", _axis(n)) for n in range(10)])
        await _file(store, "file-b", [(f"b {n}", _axis(n, 13)) for n in range(10, 13)])
        await store.add_kb_file(KbFile("vs_1", "file-c", "key_1", "in_progress", 2.0, 10, 200, 40,
                                       attributes={"team": "ml"}))
        await store.finish_kb_file("vs_1", "file-c", [NewPassage(0, "c near 3", _v(*(
            [0.9 if i == 3 else 0.1 for i in range(13)])))])
        await index.load("vs_1")
        while index.building("vs_1"):
            await asyncio.sleep(0.01)
        only = await _only(store, parse_filter({"type": "eq", "key": "team", "value": "ml"}))
        assert only.files == frozenset({("vs_1", "file-c")})

        # "a 3" is the nearest of all to axis 3; the filter keeps only file-c's passage, one by one ...
        hits = await search(store, index, ["vs_1"], "which", _axis(3), 3, VECTOR, only)
        assert [h.passage.text for h in hits] == ["c near 3"]
        # ... and through the graph, asked wider, when it keeps more than are compared one by one.
        monkeypatch.setattr(retrieval, "FILTERED_EXACT", 0)
        hits = await search(store, index, ["vs_1"], "which", _axis(3), 3, VECTOR, only)
        assert [h.passage.text for h in hits] == ["c near 3"]
        nothing = await _only(store, parse_filter({"type": "eq", "key": "team", "value": "ops"}))
        assert await search(store, index, ["vs_1"], "which", _axis(3), 3, HYBRID, nothing) == []
    finally:
        await index.stop()


async def test_a_large_base_is_read_a_page_at_a_time_and_a_file_across_pages_is_kept_whole(store, monkeypatch):
    from llmgw.kb import index as index_module

    monkeypatch.setattr(index_module, "LOAD_PAGE", 3)  # pages of 3 passages: file-a's 10 span four of them
    index = KbIndex(store, exact_below=4)
    try:
        await _base(store)
        await _file(store, "file-a", [(f"a {n}", _axis(n)) for n in range(10)])
        await _file(store, "file-b", [("b", _axis(11))])
        await index.load("vs_1")
        while index.building("vs_1"):
            await asyncio.sleep(0.01)

        assert "vs_1" in index.near and index.passages("vs_1") == 11
        for n in (0, 5, 9):  # the first page's, a middle one's, the last's
            hits = await search(store, index, ["vs_1"], "which", _axis(n), 1, VECTOR)
            assert [h.passage.text for h in hits] == [f"a {n}"]
    finally:
        await index.stop()
