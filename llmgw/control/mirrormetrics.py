"""The model mirrors as Prometheus sees them: each one answering or not, what it holds, what it lacks of its peers'.

Read at scrape time from the leader's last read of each mirror (mirrors.py,
every mirror.read_every), never from the mirrors themselves. A mirror
`behind` holds fewer of the files its peers hold: the packaged alert
(packaging/prometheus/llmgw-rules.yml, LlmgwMirrorBehind) fires when that
lasts, since a node sent to it waits for its copy or goes to the hub.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily

from llmgw.control.mirrors import MirrorKeeper


class MirrorCollector:
    def __init__(self, mirrors: MirrorKeeper, leading: Callable[[], bool]) -> None:
        self._mirrors = mirrors
        self._leading = leading

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if not self._leading():
            return
        up = GaugeMetricFamily("llmgw_mirror_up", "1 while a model mirror answered the leader's last read",
                               labels=["mirror"])
        held = GaugeMetricFamily("llmgw_mirror_files_held", "Files a model mirror holds whole and checked",
                                 labels=["mirror"])
        behind = GaugeMetricFamily("llmgw_mirror_files_behind", "Files another model mirror holds that this one "
                                   "does not (yet)", labels=["mirror"])
        seen = list(self._mirrors.seen.values())
        holding = {s.url: {f.get("key") for f in s.files if f.get("state") == "held"} for s in seen}
        for s in seen:
            others = set().union(*(keys for url, keys in holding.items() if url != s.url))
            up.add_metric([s.url], 1 if s.ok else 0)
            held.add_metric([s.url], len(holding[s.url]))
            behind.add_metric([s.url], len(others - holding[s.url]))
        yield from (up, held, behind)
