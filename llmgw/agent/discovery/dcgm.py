"""Reading a dcgm-exporter on the node for the cards GPM does not cover (before Hopper).

Most nodes run no exporter: one that did not answer is left alone for
five minutes, so a node without one costs a refused connection every five
minutes rather than one a heartbeat.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from llmgw.agent.discovery.profile import Profile

RETRY_S = 300.0
TIMEOUT_S = 2.0
MOST_BYTES = 4 << 20

# The exporter's fields read, each a ratio of one (its default field list has them on every card DCGM can profile).
FIELDS = {
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active",
    "DCGM_FI_PROF_SM_OCCUPANCY": "sm_occupancy",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram_active",
}


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:  # noqa: S310 - agent.yaml's URL, checked http(s)
        if r.status != 200:
            raise OSError(f"answered {r.status}")
        return r.read(MOST_BYTES).decode("utf-8", "replace")


class DCGMSource:
    def __init__(self, url: str, get: Callable[[str], str] = http_get,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self._get = get
        self._clock = clock
        self._quiet_until = 0.0
        self._lock = threading.Lock()
        self.last_error = ""

    def read(self) -> dict[int, Profile]:
        with self._lock:
            if self._clock() < self._quiet_until:
                return {}
            try:
                body = self._get(self.url)
            except (OSError, http.client.HTTPException, ValueError) as e:
                self.last_error = _why(e)
                self._quiet_until = self._clock() + RETRY_S
                return {}
            self.last_error = ""
            return parse(body)


def _why(e: Exception) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"answered {e.code} {e.reason}"
    reason = getattr(e, "reason", e)
    return getattr(reason, "strerror", None) or str(reason)


def parse(body: str) -> dict[int, Profile]:
    """The exporter's Prometheus text: a line per field and card, the card in the `gpu` label.

    A card with none of the fields (DCGM cannot profile it) is left out. A
    MIG instance's lines carry a non-empty GPU_I_ID and are left out too:
    these are whole cards' figures.
    """
    out: dict[int, Profile] = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        start, end = line.find("{"), line.rfind("}")
        if start < 0 or end < start:
            continue
        name = FIELDS.get(line[:start].strip())
        if name is None:
            continue
        labels = _labels(line[start + 1:end])
        if labels.get("GPU_I_ID"):
            continue
        gpu = labels.get("gpu", "")
        rest = line[end + 1:].split()
        if not gpu.isdigit() or not rest:
            continue
        try:
            value = float(rest[0])
        except ValueError:
            continue
        if value < 0 or value != value:
            continue
        p = out.setdefault(int(gpu), Profile(source="dcgm"))
        setattr(p, name, round(100 * value, 2))
    return out


def _labels(text: str) -> dict[str, str]:
    """A Prometheus label set, quotes and escapes honoured (a modelName may hold a comma)."""
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            break
        key = text[i:eq].strip().lstrip(",").strip()
        j = eq + 1
        if j >= n or text[j] != '"':
            break
        j += 1
        value = []
        while j < n and text[j] != '"':
            if text[j] == "\\" and j + 1 < n:
                j += 1
                value.append({"n": "\n"}.get(text[j], text[j]))
            else:
                value.append(text[j])
            j += 1
        out[key] = "".join(value)
        i = j + 1
    return out
