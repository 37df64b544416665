"""How much of each chip works, read from a dcgm-exporter and GPM.

The exporter is a real local HTTP server serving the text a real one wrote.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fakenvml import FakeCard, FakeNVML

from llmgw.agent.discovery import Discovery
from llmgw.agent.discovery.dcgm import RETRY_S, DCGMSource
from llmgw.config.agent import DiscoverySettings

# dcgm-exporter 3.3's output for two cards and a MIG instance: card 0
# profiled, card 1 a model DCGM cannot profile (device fields, no PROF
# ones), card 2's figure an instance's, not the card's. The exporter writes
# each sample on one line; a `\` at a line's end here joins it to the next.
EXPORTER_TEXT = """# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",pci_bus_id="00000000:17:00.0",device="nvidia0",\
modelName="NVIDIA L40S",Hostname="n1"} 100
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",pci_bus_id="00000000:CA:00.0",device="nvidia1",\
modelName="Quadro RTX 6000",Hostname="n1"} 92
# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned (in %).
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",pci_bus_id="00000000:17:00.0",device="nvidia0",\
modelName="NVIDIA L40S, rev. 2",Hostname="n1"} 0.007042
DCGM_FI_PROF_SM_ACTIVE{gpu="2",UUID="GPU-c",pci_bus_id="00000000:31:00.0",device="nvidia2",\
modelName="NVIDIA A100",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",Hostname="n1"} 0.5
# HELP DCGM_FI_PROF_SM_OCCUPANCY The ratio of number of warps resident on an SM.
# TYPE DCGM_FI_PROF_SM_OCCUPANCY gauge
DCGM_FI_PROF_SM_OCCUPANCY{gpu="0",UUID="GPU-a",pci_bus_id="00000000:17:00.0",device="nvidia0",\
modelName="NVIDIA L40S",Hostname="n1"} 0.25
# HELP DCGM_FI_PROF_PIPE_TENSOR_ACTIVE Ratio of cycles the tensor (HMMA) pipe is active.
# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",UUID="GPU-a",pci_bus_id="00000000:17:00.0",device="nvidia0",\
modelName="NVIDIA L40S",Hostname="n1"} 0.000000
"""


class Exporter:
    """A dcgm-exporter stand-in on loopback: serves `text` at /metrics with `status`, counting requests."""

    def __init__(self, text: str = EXPORTER_TEXT, status: int = 200) -> None:
        self.text, self.status, self.requests = text, status, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests += 1
                body = outer.text.encode()
                self.send_response(outer.status if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporter():
    e = Exporter()
    yield e
    e.close()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_dcgm_exporter_says_how_much_of_each_whole_card_works(exporter):
    got = DCGMSource(exporter.url).read()
    assert list(got) == [0]  # card 1 unprofiled, card 2's line a MIG instance's
    p = got[0]
    # An L40S 100% "busy" with one SM of 142 at work.
    assert (p.sm_active, p.sm_occupancy, p.tensor_active, p.source) == (0.7, 25.0, 0.0, "dcgm")
    assert p.dram_active == -1  # a field the exporter does not send is unknown, not zero


def test_an_exporter_that_does_not_answer_is_asked_again_only_after_five_minutes(exporter):
    exporter.status = 503
    clock = Clock()
    source = DCGMSource(exporter.url, clock=clock)
    for _ in range(10):  # fifty seconds of heartbeats
        assert source.read() == {}
        clock.now += 5
    assert exporter.requests == 1
    assert "503" in source.last_error
    clock.now += RETRY_S
    exporter.status = 200
    assert list(source.read()) == [0] and exporter.requests == 2
    # One that answers is asked every time.
    source.read()
    assert exporter.requests == 3


def test_a_node_without_an_exporter_costs_one_refused_connection_every_five_minutes(exporter):
    url = exporter.url
    exporter.close()  # nothing listens there now
    clock = Clock()
    source = DCGMSource(url, clock=clock)
    assert source.read() == {} and source.last_error
    assert source._quiet_until == clock.now + RETRY_S


def _discovery(tmp_path, lib, url, **kw):
    return Discovery(DiscoverySettings(dcgm_exporter=url), [str(tmp_path)], measure_bandwidth=False, nvml_lib=lib,
                     driver_marker=str(tmp_path / "none"), sysfs=str(tmp_path / "sys"), **kw)


def test_gpm_is_preferred_and_the_exporter_fills_the_cards_gpm_does_not_cover(tmp_path, exporter):
    exporter.text = 'DCGM_FI_PROF_SM_ACTIVE{gpu="0"} 0.5\nDCGM_FI_PROF_SM_ACTIVE{gpu="1"} 0.9\n'
    ampere = FakeCard(name="NVIDIA A100", uuid="GPU-a", bus="00000000:17:00.0", total_mb=40960, cc=(8, 0))
    hopper = FakeCard(name="NVIDIA H100", uuid="GPU-h", bus="00000000:18:00.0", total_mb=81559, gpm={2: 40.0})
    d = _discovery(tmp_path, FakeNVML([ampere, hopper]), exporter.url)
    d.register_parts()
    d.sample()
    got = {s.index: s for s in d.sample().gpus}
    assert (got[0].profile_source, got[0].sm_active_percent) == ("dcgm", 50.0)
    assert (got[1].profile_source, got[1].sm_active_percent) == ("gpm", 40.0)


def test_an_all_gpm_node_never_asks_the_exporter(tmp_path, exporter):
    hopper = FakeCard(name="NVIDIA H100", uuid="GPU-h", bus="00000000:18:00.0", total_mb=81559, gpm={2: 40.0})
    d = _discovery(tmp_path, FakeNVML([hopper]), exporter.url)
    d.register_parts()
    d.sample()  # GPM has nothing yet: the exporter is asked for the card
    asked = exporter.requests
    for _ in range(3):
        d.sample()
    assert exporter.requests == asked


def test_off_reads_no_exporter_and_a_node_without_gpus_asks_none(tmp_path, exporter):
    ampere = FakeCard(name="NVIDIA A100", uuid="GPU-a", bus="00000000:17:00.0", total_mb=40960, cc=(8, 0))
    d = _discovery(tmp_path, FakeNVML([ampere]), "off")
    d.register_parts()
    assert not d.sample().gpus[0].has_profile
    d = _discovery(tmp_path, FakeNVML([]), exporter.url)
    d.register_parts()
    d.sample()
    assert exporter.requests == 0
