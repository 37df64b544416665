"""GPUs read through NVML: cards, MIG instances, NVLink, PCIe links, use, and GPM's profiles.

Through fakenvml.FakeNVML (why: no GPU on CI; see that module), and the
real pynvml where it can run without a driver.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pynvml
import pytest
from fakenvml import FakeCard, FakeMIG, FakeNVML

from llmgw.agent.discovery import Discovery
from llmgw.agent.discovery.nvml import NVMLReader
from llmgw.config.agent import DiscoverySettings

NO_DCGM = DiscoverySettings(dcgm_exporter="off", nvidia_smi="/nonexistent/nvidia-smi")


def h100(i: int, bus: str, **kw) -> FakeCard:
    return FakeCard(name="NVIDIA H100 80GB HBM3", uuid=f"GPU-h100-{i}", bus=bus, total_mb=81559, cc=(9, 0), **kw)


def discovery(lib, tmp_path, settings=NO_DCGM, **kw) -> Discovery:
    return Discovery(settings, [str(tmp_path)], measure_bandwidth=False, nvml_lib=lib,
                     driver_marker=str(tmp_path / "no-driver"), sysfs=str(tmp_path / "sys"), **kw)


def test_a_two_card_nvlinked_node_reports_both_cards_and_each_others_link(tmp_path):
    lib = FakeNVML([h100(0, "00000000:18:00.0", links=["00000000:2A:00.0"] * 4),
                    h100(1, "00000000:2A:00.0", links=["00000000:18:00.0"] * 4)])
    host, gpus, _ = discovery(lib, tmp_path).register_parts()
    assert host.nvidia_driver == "550.54.15" and host.cuda_version == "12.4" and host.gpu_note == ""
    assert [(g.index, g.name, g.memory_mb, g.compute_capability, g.source) for g in gpus] == [
        (0, "NVIDIA H100 80GB HBM3", 81559, "9.0", "nvml"), (1, "NVIDIA H100 80GB HBM3", 81559, "9.0", "nvml")]
    assert gpus[0].nvlink_peers == [1] and gpus[1].nvlink_peers == [0]
    assert gpus[0].uuid == "GPU-h100-0"


def test_cards_on_an_nvswitch_are_each_linked_to_every_other(tmp_path):
    # On an HGX board every link ends at a switch, whose bus id is no card's.
    lib = FakeNVML([h100(i, f"00000000:{0x18 + i:02X}:00.0", links=["switch"] * 18) for i in range(4)]
                   + [h100(4, "00000000:40:00.0")])
    _, gpus, _ = discovery(lib, tmp_path).register_parts()
    assert [g.nvlink_peers for g in gpus] == [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2], []]


def test_a_card_in_mig_mode_is_its_instances_numbered_from_1000(tmp_path):
    a100 = FakeCard(name="NVIDIA A100-SXM4-80GB", uuid="GPU-a100", bus="00000000:17:00.0", total_mb=81920, cc=(8, 0),
                    migs=[FakeMIG("NVIDIA A100-SXM4-80GB MIG 3g.40gb", "MIG-aaa", 40192, 37, 2, 0),
                          FakeMIG("NVIDIA A100-SXM4-80GB MIG 2g.20gb", "MIG-bbb", 19968, 13, 3, 0)])
    plain = FakeCard(name="NVIDIA A100-SXM4-80GB", uuid="GPU-plain", bus="00000000:31:00.0", total_mb=81920, cc=(8, 0))
    lib = FakeNVML([plain, a100])
    d = discovery(lib, tmp_path)
    _, gpus, _ = d.register_parts()
    assert [g.index for g in gpus] == [0, 1100, 1101]
    mig = gpus[1]
    assert (mig.uuid, mig.memory_mb, mig.compute_capability) == ("MIG-aaa", 40192, "8.0")
    assert (mig.mig.parent_index, mig.mig.parent_uuid, mig.mig.gpu_instance, mig.mig.profile) == (
        1, "GPU-a100", 2, "3g.40gb")
    assert gpus[2].mig.profile == "2g.20gb" and gpus[2].mig.gpu_instance == 3
    # Each instance's memory in use is its own; nobody measures utilisation per instance.
    sensors = {s.index: s for s in d.sample().gpus}
    assert sensors[1100].memory_used_mb == 37 and sensors[1101].memory_used_mb == 13
    assert sensors[1100].utilization_percent == 0 and sensors[1100].power_limit_w == 0


def test_pcie_link_is_read_against_the_cards_own_lanes_from_sysfs(tmp_path):
    # The driver says x8 of x8 for a x16 card in a slot wired x8: the
    # device's own max_link_width in sysfs says 16.
    dev = tmp_path / "sys" / "0000:3b:00.0"
    dev.mkdir(parents=True)
    for name, value in {"max_link_width": "16", "current_link_width": "8", "max_link_speed": "32.0 GT/s PCIe"}.items():
        (dev / name).write_text(value + "\n")
    lib = FakeNVML([h100(0, "00000000:3B:00.0", pcie=(5, 5, 8, 8))])
    _, gpus, _ = discovery(lib, tmp_path).register_parts()
    g = gpus[0]
    assert (g.pcie_gen, g.pcie_gpu_gen, g.pcie_width, g.pcie_width_max) == (5, 5, 8, 16)


def test_each_sample_carries_use_and_memory_held_by_others(tmp_path):
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # The engine's own child holds memory too: still the engine's.
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            card = h100(0, "00000000:18:00.0", used_mb=23000, util=92, temp=71, power_mw=239520,
                        procs=[(engine.pid, 20000), (1, 700)])
            lib = FakeNVML([card])
            d = discovery(lib, tmp_path)
            d.register_parts()
            hb = d.sample(engine_pids=[engine.pid])
            s = hb.gpus[0]
            assert (s.utilization_percent, s.memory_used_mb, s.temperature_c, s.power_w) == (92, 23000, 71, 239.5)
            assert s.power_limit_w == 700.0  # an H100 SXM's enforced limit, as its driver says it in mW
            # 700 MB of somebody else's, and 2300 nobody's process holds (the driver's own).
            assert hb.gpu_foreign_memory_mb == [3000]
            # A process the engine did not start is somebody else's, however it is named.
            card.procs = [(engine.pid, 20000), (os.getpid(), 1000)]
            assert d.sample(engine_pids=[engine.pid]).gpu_foreign_memory_mb == [3000]
        finally:
            child.kill()
            child.wait()
    finally:
        engine.kill()
        engine.wait()


def test_a_card_whose_driver_keeps_its_power_limit_to_itself_says_zero_not_a_guess(tmp_path):
    # Some GeForce boards answer NOT_SUPPORTED for the limit while they do say what they draw.
    card = FakeCard(name="NVIDIA GeForce RTX 4090", uuid="GPU-4090", bus="00000000:01:00.0", total_mb=24564,
                    cc=(8, 9), util=40, power_mw=312000, power_limit_mw=None)
    d = discovery(FakeNVML([card]), tmp_path)
    d.register_parts()
    s = d.sample().gpus[0]
    assert (s.power_w, s.power_limit_w, s.utilization_percent) == (312.0, 0.0, 40)


def test_a_process_started_by_an_engine_counts_as_the_engines(tmp_path):
    # Strata's server starts its engine in a process group of its own; that
    # engine holding the card is still the shard's.
    script = ("import subprocess, sys, time; "
              "p = subprocess.Popen([sys.executable, '-c', 'import os, time; os.setpgrp(); time.sleep(30)']); "
              "print(p.pid, flush=True); time.sleep(30)")
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(server.stdout.readline())
        card = h100(0, "00000000:18:00.0", used_mb=23000, procs=[(grandchild, 22226), (1, 700)])
        d = discovery(FakeNVML([card]), tmp_path)
        d.register_parts()
        assert d.sample(engine_pids=[server.pid]).gpu_foreign_memory_mb == [774]
        os.kill(grandchild, 9)
    finally:
        server.kill()
        server.wait()


def test_gpm_profiles_appear_from_the_second_sample_on_cards_that_have_it(tmp_path):
    hopper = h100(0, "00000000:18:00.0", gpm={2: 69.0, 3: 45.5, 5: 1.0})  # no DRAM figure
    ampere = FakeCard(name="NVIDIA A100", uuid="GPU-a", bus="00000000:31:00.0", total_mb=40960, cc=(8, 0))
    d = discovery(FakeNVML([hopper, ampere]), tmp_path)
    d.register_parts()
    first = d.sample().gpus
    assert not any(s.has_profile for s in first)  # GPM measures between two samples
    second = {s.index: s for s in d.sample().gpus}
    p = second[0]
    assert p.has_profile and p.profile_source == "gpm"
    assert (p.sm_active_percent, p.sm_occupancy_percent, p.tensor_active_percent) == (69.0, 45.5, 1.0)
    assert p.dram_active_percent == -1  # not reported is not zero
    assert not second[1].has_profile and second[1].sm_active_percent == -1


def test_a_driver_that_is_not_loaded_is_said_and_nvidia_smi_is_tried(tmp_path):
    lib = FakeNVML([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    host, gpus, _ = discovery(lib, tmp_path).register_parts()
    assert gpus == []
    assert "NVIDIA kernel driver is not loaded" in host.gpu_note
    assert "/nonexistent/nvidia-smi is not installed" in host.gpu_note


def test_a_driver_upgraded_without_a_reboot_says_to_reboot(tmp_path):
    lib = FakeNVML([], init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    host, gpus, _ = discovery(lib, tmp_path).register_parts()
    assert gpus == [] and "reboot the node" in host.gpu_note


def test_skip_gpus_reports_none_however_many_there_are(tmp_path):
    lib = FakeNVML([h100(0, "00000000:18:00.0")])
    settings = DiscoverySettings(skip_gpus=True, dcgm_exporter="off")
    host, gpus, _ = discovery(lib, tmp_path, settings=settings).register_parts()
    assert gpus == [] and "skip_gpus" in host.gpu_note
    assert "nvmlInit" not in lib.calls


def test_the_real_nvidia_ml_py_imports_and_says_its_library_is_missing_without_a_driver(tmp_path):
    if os.path.exists("/proc/driver/nvidia"):
        pytest.skip("this machine has an NVIDIA driver")
    reader = NVMLReader()  # the installed pynvml
    with pytest.raises(Exception) as raised:
        reader.inventory()
    assert "libnvidia-ml.so.1" in str(raised.value) and not raised.value.driver_seen
    # And a node with neither NVML's library nor nvidia-smi has no GPUs and nothing to fix.
    host, gpus, _ = Discovery(NO_DCGM, [str(tmp_path)], measure_bandwidth=False).register_parts()
    assert gpus == [] and host.gpu_note == ""


def test_the_fake_calls_only_what_pynvml_has(tmp_path):
    card = h100(0, "00000000:18:00.0", links=["00000000:2A:00.0"], gpm={2: 1.0}, procs=[(1, 1)],
                migs=[FakeMIG("X MIG 1g.10gb", "MIG-x", 9984, 0, 1, 0)])
    lib = FakeNVML([card, h100(1, "00000000:2A:00.0")])
    d = discovery(lib, tmp_path)
    d.register_parts()
    d.sample()
    d.sample()
    d.close()
    called = set(lib.calls)
    assert {"nvmlInit", "nvmlGpmMetricsGet", "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlShutdown"} <= called
    assert sorted(name for name in called if not hasattr(pynvml, name)) == []
