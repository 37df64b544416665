"""The memory's read rate: sized past the caches, never pushing a node into swap, measured in the background."""

from __future__ import annotations

import sys

import pytest

from llmgw.agent.discovery import Discovery, bandwidth
from llmgw.agent.discovery.bandwidth import LEAST, MOST, buffer_size, last_cache_bytes, measure
from llmgw.config.agent import DiscoverySettings

# Small enough for a test machine shared with others; a figure, not an accurate one.
SMALL = 64 << 20


def test_the_last_level_cache_is_read_from_sysfs(tmp_path):
    for path, size in {"cpu0/cache/index0/size": "48K", "cpu0/cache/index2/size": "2048K",
                       "cpu0/cache/index3/size": "96M", "cpu1/cache/index3/size": "32768K"}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(size + "\n")
    assert last_cache_bytes(str(tmp_path)) == 96 << 20
    assert last_cache_bytes(str(tmp_path / "none")) == 0


def test_the_buffer_is_eight_times_the_cache_at_least_and_a_quarter_of_free_memory_at_most():
    gib = 1 << 30
    assert buffer_size(32 << 20, 64 * gib) == MOST
    assert buffer_size(32 << 20, 4 * gib) == gib  # a quarter of what is free
    # A gigabyte of cache (some EPYCs with 3D V-Cache) needs 8 GB free for a quarter of it to be past it.
    assert buffer_size(1 * gib, 16 * gib) == 0
    assert buffer_size(0, 512 << 20) == 0  # under the least, whatever the cache
    assert buffer_size(0, 4 * LEAST) == LEAST


def test_memory_is_read_at_a_plausible_rate_with_numpy():
    pytest.importorskip("numpy")
    assert bandwidth.reader_name() == "numpy"
    assert 0.5 < measure(SMALL) < 5000


def test_memory_is_read_without_numpy_through_the_c_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)  # an agent installed without the test extras
    assert bandwidth.reader_name() == "memchr"
    assert 0.5 < measure(SMALL) < 5000


def test_the_figure_is_measured_once_in_the_background_after_the_delay(tmp_path):
    calls = []

    def measure_small():
        calls.append(1)
        return measure(SMALL)

    d = Discovery(DiscoverySettings(dcgm_exporter="off"), [str(tmp_path)], bandwidth_delay_s=0.2,
                  measure_fn=measure_small)
    d.start()
    assert d.mem_bandwidth_gbs == 0  # registering does not wait for it
    assert d.register_parts()[0].mem_bandwidth_gbs == 0
    assert d._bandwidth.wait(60)
    assert d.mem_bandwidth_gbs > 0.5 and calls == [1]
    assert d.register_parts()[0].mem_bandwidth_gbs == d.sample().mem_bandwidth_gbs == d.mem_bandwidth_gbs
    d.close()


def test_with_no_room_to_measure_it_tries_again_later_rather_than_guessing():
    answers = iter([0.0, 0.0, 42.0])
    m = bandwidth.BackgroundMeasurement(0, lambda: next(answers), retry_s=0.01)
    m.start()
    assert m.wait(10) and m.gbs == 42.0


def test_stopping_before_the_delay_measures_nothing():
    calls = []
    m = bandwidth.BackgroundMeasurement(30, lambda: calls.append(1) or 1.0)
    m.start()
    m.stop()
    m.wait(5)
    assert calls == [] and m.gbs == 0
