"""`llmgw ctl usage`, `usage export` and `request` against a real `llmgw server`.

Usage rows are put in the server's SQLite file directly (WAL lets another
process write beside it), as the router's writer will once it answers.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import pytest

from llmgw.store import Usage, open_store
from tests.support.servers import Server


def utc(*args) -> float:
    return dt.datetime(*args, tzinfo=dt.UTC).timestamp()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("usage"), "cp1")
    done = s.init()
    assert done.returncode == 0, done.stderr
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def keys(server):
    made = {name: server.ctl_json("keys", "create", name, "--project", project, "--create")
            for name, project in (("alice", "Acme/ml/chat"), ("bob", "Acme/ops/infra"))}
    return made


async def insert(server: Server, rows: list[Usage]) -> None:
    store = await open_store(server.store)
    try:
        await store.add_usage(rows)
    finally:
        await store.close()


async def project_id(server: Server, path: str) -> str:
    store = await open_store(server.store)
    try:
        return (await store.project_by_path(*path.split("/"))).project.id
    finally:
        await store.close()


async def test_usage_sums_requests_errors_tokens_and_money_per_key_with_a_total(server, keys):
    alice, bob = keys["alice"], keys["bob"]
    chat, infra = await project_id(server, "Acme/ml/chat"), await project_id(server, "Acme/ops/infra")
    day = utc(2025, 1, 10, 12)
    await insert(server, [
        Usage(id="sum_1", at=day, key_id=alice["id"], project_id=chat, model="llama", prompt_tokens=100,
              cached_tokens=40, completion_tokens=50, cost_micros=1_250_000),
        Usage(id="sum_2", at=day + 1, key_id=alice["id"], project_id=chat, model="qwen", status=429),
        Usage(id="sum_3", at=day + 2, key_id=bob["id"], project_id=infra, model="llama", prompt_tokens=10,
              completion_tokens=5, cost_micros=3_000_000),
        Usage(id="sum_4", at=utc(2025, 1, 12), key_id=bob["id"], project_id=infra, model="llama",
              cost_micros=99_000_000),  # outside the span asked for
    ])

    answer = server.ctl_json("ctl", "usage", "--since", "2025-01-10", "--until", "2025-01-11")

    by_name = {g["name"]: g for g in answer["rows"]}
    assert [g["name"] for g in answer["rows"]] == ["bob", "alice"]  # most costly first
    assert by_name["alice"]["project"] == "Acme/ml/chat"
    assert (by_name["alice"]["requests"], by_name["alice"]["errors"]) == (2, 1)
    assert (by_name["alice"]["prompt_tokens"], by_name["alice"]["cached_tokens"],
            by_name["alice"]["completion_tokens"]) == (100, 40, 50)
    assert by_name["alice"]["cost"] == "1.25"
    assert answer["total"]["requests"] == 3 and answer["total"]["cost_micros"] == 4_250_000

    shown = server.ctl("ctl", "usage", "--since", "2025-01-10", "--until", "2025-01-11")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1].split()[:3] == ["KEY", "PROJECT", "REQUESTS"]
    assert lines[2].split() == ["bob", "Acme/ops/infra", "1", "0", "10", "0", "5", "3.00"]
    assert lines[-1].split() == ["total", "3", "1", "110", "40", "55", "4.25"]


async def test_usage_by_project_and_by_model_name_what_people_know(server, keys):
    chat = await project_id(server, "Acme/ml/chat")
    day = utc(2025, 2, 3)
    await insert(server, [
        Usage(id=f"grp_{n}", at=day + n, key_id=keys["alice"]["id"], project_id=chat,
              model="llama" if n % 2 else "qwen", cost_micros=10) for n in range(10)
    ] + [Usage(id="grp_nokey", at=day, key_id=None, project_id=None, model="llama", status=401)])

    by_project = server.ctl_json("ctl", "usage", "--by", "project", "--since", "2025-02-03",
                                 "--until", "2025-02-04")
    by_model = server.ctl_json("ctl", "usage", "--by", "model", "--since", "2025-02-03",
                               "--until", "2025-02-04")

    assert [(g["name"], g["requests"], g["cost"]) for g in by_project["rows"]] == [
        ("Acme/ml/chat", 10, "0.0001"), ("(no project)", 1, "0.00")]
    assert [(g["name"], g["requests"]) for g in by_model["rows"]] == [("llama", 6), ("qwen", 5)]


async def test_an_export_streams_every_row_as_csv_to_a_file_and_as_json_lines_to_stdout(server, keys, tmp_path):
    chat = await project_id(server, "Acme/ml/chat")
    day = utc(2025, 3, 1)
    # More than two of the server's pages of a thousand.
    await insert(server, [
        Usage(id=f"exp_{n:05d}", at=day + n, key_id=keys["alice"]["id"], project_id=chat, model="llama",
              cost_micros=n, detail={"endpoint_tries": n % 3}) for n in range(2500)
    ])
    target = tmp_path / "march.csv"

    done = server.ctl("ctl", "usage", "export", "--format", "csv", "--since", "2025-03-01",
                      "--until", "2025-03-02", "--output", str(target))

    assert done.returncode == 0, done.stderr
    assert "wrote 2500 usage rows to" in done.stderr
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert len(rows) == 2500 and len({r["id"] for r in rows}) == 2500
    assert rows[0]["time"] == "2025-03-01T00:00:00.000Z"
    assert json.loads(rows[7]["detail"]) == {"endpoint_tries": 1}
    assert not (tmp_path / "march.csv.partial").exists()

    streamed = server.ctl("ctl", "usage", "export", "--format", "jsonl", "--since", "2025-03-01",
                          "--until", "2025-03-01T00:10")
    assert streamed.returncode == 0, streamed.stderr
    lines = [json.loads(line) for line in streamed.stdout.splitlines()]
    assert [r["id"] for r in lines] == [f"exp_{n:05d}" for n in range(600)]
    assert sum(r["cost_micros"] for r in lines) == sum(range(600))


async def test_one_request_is_shown_with_its_decisions_and_an_unknown_one_is_a_sentence(server, keys):
    chat = await project_id(server, "Acme/ml/chat")
    await insert(server, [Usage(
        id="req_detail", at=utc(2025, 4, 1, 9, 30), key_id=keys["alice"]["id"], project_id=chat,
        model="llama", endpoint="http://10.0.0.7:8000", status=200, prompt_tokens=12, completion_tokens=3,
        cost_micros=42, ttft_ms=80.0, duration_ms=900.0,
        detail={"retries": [{"endpoint": "http://10.0.0.8:8000", "status": 503}], "breaker": "open"})])

    row = server.ctl_json("ctl", "request", "req_detail")
    assert row["key_name"] == "alice" and row["project"] == "Acme/ml/chat"
    assert row["detail"]["breaker"] == "open" and row["cost"] == "0.000042"

    shown = server.ctl("ctl", "request", "req_detail")
    assert shown.returncode == 0, shown.stderr
    assert "endpoint:    http://10.0.0.7:8000" in shown.stdout
    assert "breaker: open" in shown.stdout

    missing = server.ctl("ctl", "request", "req_nothing")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "llmgw: there is no request req_nothing in the usage records; give the answer's id "
        "(chatcmpl-…, msg_…, resp_…) or its x-request-id. A request's row is written "
        "within a second or so of its answer")


def test_times_that_cannot_be_read_are_refused_naming_the_option(server):
    done = server.ctl("ctl", "usage", "--since", "last tuesday")
    assert done.returncode == 1
    assert "--since: expected a duration like 24h or 7d, a date like 2026-03-01, or now" in done.stderr
    done = server.ctl("ctl", "usage", "--since", "2025-01-02", "--until", "2025-01-01")
    assert done.returncode == 1 and "--until is before --since" in done.stderr


@pytest.fixture
def cluster_of_its_own():
    """PostgreSQL for one test that stops it part-way."""
    from tests.support.pgcluster import PgCluster

    try:
        cluster = PgCluster()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    yield cluster
    cluster.destroy()


async def test_an_export_cut_off_by_the_store_going_away_says_so_and_leaves_no_whole_looking_file(
        tmp_path, cluster_of_its_own):
    import subprocess
    import sys

    url = cluster_of_its_own.create_database()
    pg = Server(tmp_path, "cp-pg", store=url)
    assert pg.init().returncode == 0
    pg.start()
    try:
        # Far more than the sockets between the three processes hold, so the
        # server is still reading pages when the store goes.
        await insert(pg, [Usage(id=f"cut_{n:06d}", at=utc(2025, 5, 1) + n / 10, key_id="key_x",
                                project_id=None, model="llama", endpoint="http://10.0.0.7:8000/v1",
                                detail={"note": "x" * 200}) for n in range(60_000)])
        export = subprocess.Popen(
            [sys.executable, "-m", "llmgw", "ctl", "usage", "export", "--format", "jsonl",
             "--since", "2025-05-01", "--until", "2025-05-02", "--admin", pg.admin,
             "--token-file", pg.token_file],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            first = export.stdout.read(4096)  # the export has begun, and now waits on this reader
            assert first.startswith(b'{"id":"cut_000000"')
            cluster_of_its_own.stop()
            rest, err = export.communicate(timeout=60)
        finally:
            if export.poll() is None:
                export.kill()
                export.wait()
        got = (first + rest).count(b"\n")
        assert export.returncode == 1
        assert 0 < got < 60_000
        assert err.decode().strip().startswith("llmgw: the export was cut off after ")
        assert "(the server or its store stopped answering)" in err.decode()
    finally:
        pg.stop()
        if not cluster_of_its_own.running():
            cluster_of_its_own.start()
