"""nginx as an instant engine: the same answer every time, in no time, for `bench overhead`.

The sim-engine is Python too, so a figure measured against it mixes what
the gateway adds with how the engine behaves beside it on the same core.
nginx answers a fixed chat completion (POST /v1/chat/completions) and a
fixed 64-token stream (POST /stream/v1/chat/completions) from `return`,
without reading a file or a request body, in tens of microseconds: what
the gateway adds in front of it is the gateway's alone. This is how the
issue's side-by-side run against other gateways was measured.

Debian's `nginx` package (`apt-get install nginx`); where it is missing
the bench says so and measures against the sim-engine only. Started as a
child of the bench with a configuration written to a temporary directory,
on 127.0.0.1 only, and stopped by its PID with SIGTERM (nginx's fast shutdown,
which ends its worker too) as the rig's other processes are.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

STREAM_TOKENS = 64
ANSWER_TOKENS = 16
PROMPT_TOKENS = 9


def available() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None)


def _chunk(delta: dict, finish: str | None = None) -> str:
    return "data: " + json.dumps({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
                                  "model": "sim", "choices": [{"index": 0, "delta": delta,
                                                               "finish_reason": finish}]},
                                 separators=(",", ":")) + "\n\n"


def answer() -> str:
    """A chat completion of ANSWER_TOKENS tokens, with its usage, as an engine sends it."""
    return json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "sim",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok " * ANSWER_TOKENS},
                     "finish_reason": "length"}],
        "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": ANSWER_TOKENS,
                  "total_tokens": PROMPT_TOKENS + ANSWER_TOKENS}}, separators=(",", ":"))


def stream() -> str:
    """A stream of STREAM_TOKENS content events, the usage event and [DONE], as vLLM sends one."""
    events = [_chunk({"role": "assistant", "content": ""})]
    events += [_chunk({"content": "tok "}) for _ in range(STREAM_TOKENS - 1)]
    events.append(_chunk({"content": "tok "}, "length"))
    events.append("data: " + json.dumps({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
                                         "model": "sim", "choices": [],
                                         "usage": {"prompt_tokens": PROMPT_TOKENS,
                                                   "completion_tokens": STREAM_TOKENS,
                                                   "total_tokens": PROMPT_TOKENS + STREAM_TOKENS}},
                                        separators=(",", ":")) + "\n\n")
    events.append("data: [DONE]\n\n")
    return "".join(events)


def config(port: int, tmp: str) -> str:
    """The configuration, and the two answers written as files under tmp/www.

    The stream is longer than nginx lets a `return` string be (4 KB), so both
    answers are static files; nginx's static files refuse POST with 405, and
    `error_page 405 =200 $uri` serves the file for it instead. open_file_cache
    keeps them open: no file is opened per request. keepalive_requests: nginx's
    default of 1,000 would close the gateway's pooled connection every second
    or so and put a reconnect into the tail being measured.
    """
    www = os.path.join(tmp, "www")
    for path, text in (("v1/chat/completions", answer()), ("stream/v1/chat/completions", stream())):
        os.makedirs(os.path.dirname(os.path.join(www, path)), exist_ok=True)
        with open(os.path.join(www, path), "w") as f:
            f.write(text)
        # nginx's worker runs as nobody when the bench runs as root.
        os.chmod(os.path.join(www, path), 0o644)
    for d in (tmp, *(os.path.join(www, p) for p in ("", "v1", "v1/chat", "stream", "stream/v1", "stream/v1/chat"))):
        os.chmod(d, 0o755)  # noqa: S103 - nginx's worker (nobody) must walk these folders
    temp = "\n".join(f"    {kind}_temp_path {os.path.join(tmp, kind)};"
                     for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""worker_processes 1;
daemon off;
pid {os.path.join(tmp, "nginx.pid")};
error_log {os.path.join(tmp, "error.log")} warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
{temp}
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    open_file_cache max=16;
    open_file_cache_valid 1h;
    etag off;
    server {{
        listen 127.0.0.1:{port};
        root {www};
        location = /v1/chat/completions {{
            default_type application/json;
            error_page 405 =200 $uri;
        }}
        location = /stream/v1/chat/completions {{
            default_type text/event-stream;
            error_page 405 =200 $uri;
        }}
    }}
}}
"""


def start(port: int, tmp: str, argv_prefix: list[str]) -> subprocess.Popen:
    """nginx on 127.0.0.1:port, its files in `tmp`; `argv_prefix` pins it (taskset) or is empty."""
    binary = available()
    if binary is None:
        raise RuntimeError("nginx is not installed; apt-get install nginx")
    path = os.path.join(tmp, "nginx.conf")
    with open(path, "w") as f:
        f.write(config(port, tmp))
    # -e: its own error log from the first line on, not /var/log/nginx's.
    return subprocess.Popen([*argv_prefix, binary, "-p", tmp, "-c", path, "-e", os.path.join(tmp, "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

