"""What is kept of an engine's output, and when an engine counts as ready."""

from __future__ import annotations

import asyncio

from supervised import next_state, script_spec

from llmgw.agent.supervisor import OutputLimits
from llmgw.agent.supervisor.ring import LogRing


def test_the_ring_keeps_whole_lines_and_forgets_the_oldest_past_its_bounds():
    ring = LogRing(OutputLimits(max_lines=3, max_bytes=1000, max_line_bytes=10))
    ring.feed(b"one\ntw")
    assert [line.text for line in ring.lines()] == ["one"]
    ring.feed(b"o\r\nthree\nfour\n" + b"y" * 25 + b"\nlast without newline")
    assert [line.text for line in ring.lines()] == ["three", "four", "y" * 10 + " …[15 bytes cut]"]
    ring.flush()
    assert [line.text for line in ring.lines(2)] == ["y" * 10 + " …[15 bytes cut]", "last witho …[10 bytes cut]"]
    assert ring.dropped_lines == 3

    small = LogRing(OutputLimits(max_lines=100, max_bytes=10, max_line_bytes=100))
    small.feed(b"12345\n67890\nabc\n\xff\xfe\n")
    # Bytes as kept: each undecodable byte is a U+FFFD, three bytes.
    assert [line.text for line in small.lines()] == ["abc", "\ufffd\ufffd"]
    assert small.size_bytes <= 10


def test_a_line_cut_by_the_emptied_file_ends_there_instead_of_running_into_the_next(tmp_path):
    from llmgw.agent.supervisor.output import OutputFollower

    limits = OutputLimits(max_lines=100, max_bytes=10_000, max_line_bytes=100, max_file_bytes=10)
    ring = LogRing(limits)
    path = tmp_path / "engine.out"
    follower = OutputFollower(path, ring, limits)
    # A block write ends mid-line; the follower reads it, passes the bound and empties the file, so the
    # rest of that line, written after, is lost with the truncation.
    path.write_bytes(b"first line\nline 24")
    follower.poll()
    assert path.stat().st_size == 0
    with open(path, "ab") as f:
        f.write(b"after the file was emptied\n")
    follower.poll()
    assert [line.text for line in ring.lines()] == ["first line", "line 24", "after the file was emptied"]

    # Emptied by someone else between two looks: the same.
    other = LogRing(limits)
    follower = OutputFollower(tmp_path / "other.out", other, OutputLimits(max_file_bytes=1 << 20))
    (tmp_path / "other.out").write_bytes(b"half a li")
    follower.poll()
    (tmp_path / "other.out").write_bytes(b"new\n")
    follower.poll()
    assert [line.text for line in other.lines()] == ["half a li", "new"]


async def test_an_engine_whose_health_says_loading_is_not_ready_until_it_stops_saying_so(supervisor, tmp_path):
    flag = tmp_path / "loaded"
    spec = script_spec(tmp_path, "slow", "", model="glm")
    (tmp_path / "slow.py").write_text(f"""
import json, os
from http.server import BaseHTTPRequestHandler, HTTPServer

class Engine(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            # 200 from the moment it listens, as FreeToken does; only the body says it is loading.
            body = b"OK" if os.path.exists({str(flag)!r}) else b'{{"status":"loading","phase":"weights"}}'
        elif self.path == "/v1/models":
            body = json.dumps({{"object": "list", "data": [{{"id": "glm"}}]}}).encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", {spec.port}), Engine).serve_forever()
""")
    shard = await supervisor.start(spec)
    await next_state(supervisor, "slow", "starting")
    for _ in range(40):
        if "loading" in shard.status().message:
            break
        await asyncio.sleep(0.1)
    assert shard.status().state == "starting"
    assert shard.status().message == "/health says loading"

    flag.write_text("yes")
    ready = await next_state(supervisor, "slow", "ready", timeout=10)
    assert ready.message == ""


async def test_an_engine_that_does_not_list_the_model_is_not_ready(supervisor, tmp_path):
    spec = script_spec(tmp_path, "wrong", "", model="asked-for")
    (tmp_path / "wrong.py").write_text(f"""
import sys
sys.argv = ["llmgw", "sim-engine", "--port", "{spec.port}", "--model", "something-else"]
from llmgw.cli.main import main
main()
""")
    shard = await supervisor.start(spec)
    for _ in range(100):
        if "does not list" in shard.status().message:
            break
        await asyncio.sleep(0.1)
    assert shard.status().state == "starting"
    assert shard.status().message == "/v1/models does not list asked-for"


async def test_an_engine_that_is_no_openai_server_is_ready_when_its_own_health_path_answers(supervisor, tmp_path):
    # ComfyUI answers /system_stats once it takes work, and has neither /health nor /v1/models.
    spec = script_spec(tmp_path, "comfy", "", model="pictures")
    spec.health_path = "/system_stats"
    (tmp_path / "comfy.py").write_text(f"""
import sys
sys.argv = ["llmgw", "sim-engine", "--comfyui", "--listen", "127.0.0.1", "--port", "{spec.port}"]
from llmgw.cli.main import main
main()
""")
    await supervisor.start(spec)
    ready = await next_state(supervisor, "comfy", "ready", timeout=20)
    assert ready.message == ""
