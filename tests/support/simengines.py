"""Real `llmgw sim-engine` processes on loopback, for the tests.

Each is started as a person would start it (`python -m llmgw sim-engine
--port 0 …`), its address read from the line it prints, and ended by its
own PID.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support import forkserver
from tests.support.processes import end, first_line


class Sim:
    def __init__(self, *args: str):
        self.args = ["--port", "0", *args]
        self.proc: subprocess.Popen | forkserver.ForkedProcess | None = None
        self.url = ""
        self.err = b""

    def start(self, timeout: float = 60) -> Sim:
        self.proc = forkserver.popen([sys.executable, "-m", "llmgw", "sim-engine", *self.args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = first_line(self.proc.stdout.fileno(), timeout)
        if b" listening on " not in line:
            self.stop()
            raise AssertionError(f"sim-engine did not start: {line!r} {self.err!r}")
        self.line = line.decode().strip()
        self.url = self.line.rsplit(" ", 1)[1]
        return self

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def stop(self) -> int | None:
        """SIGTERM by PID; its exit status (killed after 10 s if it would not go)."""
        if self.proc is None:
            return None
        _, self.err = end(self.proc)
        return self.proc.returncode


def prefix_cache_counts(server, model: str) -> tuple[float, float]:
    """(prompt tokens found in the engines' prefix caches, prompt tokens looked up), summed over the model's
    replicas as their own /metrics count them (vllm:prefix_cache_hits and _queries; sim-engine --tokenizer)."""
    import urllib.request

    hits = queries = 0.0
    for replica in server.ctl_json("ctl", "replicas", "--model", model):
        with urllib.request.urlopen(replica["url"].rsplit("/v1", 1)[0] + "/metrics", timeout=10) as r:
            page = r.read().decode()
        for line in page.splitlines():
            if line.startswith("vllm:prefix_cache_hits_total"):
                hits += float(line.split()[-1])
            elif line.startswith("vllm:prefix_cache_queries_total"):
                queries += float(line.split()[-1])
    return hits, queries
