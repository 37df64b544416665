"""GPUs read through nvidia-smi, a real (fake) nvidia-smi on PATH, when NVML cannot be loaded."""

from __future__ import annotations

import os
import subprocess
import sys

import fakesmi
import pynvml
from fakenvml import FakeNVML
from fakesmi import APPS, CARDS, CARDS_OLD, CSV, PCIE, PCIE_OLD, SENSORS, SENSORS_OLD

from llmgw.agent.discovery import Discovery
from llmgw.config.agent import DiscoverySettings

NO_NVML = FakeNVML([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
SETTINGS = DiscoverySettings(dcgm_exporter="off")


def discovery(tmp_path, settings=SETTINGS, marker: str | None = None) -> Discovery:
    return Discovery(settings, [str(tmp_path)], measure_bandwidth=False, nvml_lib=NO_NVML,
                     driver_marker=marker or str(tmp_path / "no-driver"), sysfs=str(tmp_path / "sys"))


def test_nvidia_smi_lists_the_cards_when_nvml_cannot_be_loaded(tmp_path, monkeypatch):
    fakesmi.install(tmp_path / "bin", fakesmi.TWO_CARDS)
    fakesmi.on_path(monkeypatch, tmp_path / "bin")
    d = discovery(tmp_path)
    host, gpus, _ = d.register_parts()
    assert d.gpu_reader == "nvidia-smi"
    assert (host.nvidia_driver, host.cuda_version, host.gpu_note) == ("550.54.15", "12.4", "")
    assert [(g.index, g.name, g.memory_mb, g.compute_capability, g.source) for g in gpus] == [
        (0, "NVIDIA L40S", 46068, "8.9", "nvidia-smi"), (1, "NVIDIA L40S", 46068, "8.9", "nvidia-smi")]
    assert gpus[0].uuid == "GPU-8a1c1d3e-6f2b-4c55-9b0e-1f0e2d3c4b5a"
    # Card 1 is an x16 card in a slot wired x8.
    assert [(g.pcie_gen, g.pcie_gpu_gen, g.pcie_width, g.pcie_width_max) for g in gpus] == [
        (4, 4, 16, 16), (4, 4, 8, 16)]


def test_each_sample_reads_use_and_memory_held_by_others_from_nvidia_smi(tmp_path, monkeypatch):
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        answers = dict(fakesmi.TWO_CARDS)
        answers[f"--query-compute-apps={APPS} {CSV}"] = (
            f"GPU-8a1c1d3e-6f2b-4c55-9b0e-1f0e2d3c4b5a, {engine.pid}, 22226\n"
            f"GPU-8a1c1d3e-6f2b-4c55-9b0e-1f0e2d3c4b5a, {os.getpid()}, 700\n")
        fakesmi.install(tmp_path / "bin", answers)
        fakesmi.on_path(monkeypatch, tmp_path / "bin")
        d = discovery(tmp_path)
        d.register_parts()
        hb = d.sample(engine_pids=[engine.pid])
    finally:
        engine.kill()
        engine.wait()
    assert [(s.index, s.utilization_percent, s.memory_used_mb, s.temperature_c, s.power_w, s.power_limit_w)
            for s in hb.gpus] == [(0, 92, 23000, 71, 239.52, 350), (1, 0, 512, 30, 35.1, 350)]
    assert hb.gpu_foreign_memory_mb == [774, 512]


def test_an_older_driver_that_refuses_a_field_still_gives_its_cards(tmp_path, monkeypatch):
    # A driver before 510 knows no compute_cap nor pcie.link.gen.gpumax, and refuses
    # any query naming them: the cards come from the shorter lists.
    fakesmi.install(tmp_path / "bin", {
        f"--query-gpu={CARDS_OLD} {CSV}": "0, GPU-old, Tesla T4, 15360, 00000000:00:1E.0, 470.256.02\n",
        f"--query-gpu={PCIE_OLD} {CSV}": "0, 3, 16, 16\n",
        "": fakesmi.BANNER.replace("12.4", "11.4"),
    })
    fakesmi.on_path(monkeypatch, tmp_path / "bin")
    host, gpus, _ = discovery(tmp_path).register_parts()
    assert [(g.name, g.memory_mb, g.compute_capability, g.pcie_gen, g.pcie_width) for g in gpus] == [
        ("Tesla T4", 15360, "", 3, 16)]
    assert host.nvidia_driver == "470.256.02" and host.cuda_version == "11.4"
    asked = fakesmi.calls(tmp_path / "bin")
    assert f"--query-gpu={CARDS} {CSV}" in asked and f"--query-gpu={PCIE} {CSV}" in asked


def test_a_driver_that_refuses_the_power_limit_field_still_gives_use_and_is_asked_once(tmp_path, monkeypatch):
    answers = {k: v for k, v in fakesmi.TWO_CARDS.items() if SENSORS not in k}
    answers[f"--query-gpu={SENSORS_OLD} {CSV}"] = "0, 92, 23000, 71, 239.52\n1, 0, 512, 30, 35.10\n"
    fakesmi.install(tmp_path / "bin", answers)
    fakesmi.on_path(monkeypatch, tmp_path / "bin")
    d = discovery(tmp_path)
    d.register_parts()
    first, second = d.sample(), d.sample()
    assert [(s.utilization_percent, s.power_w, s.power_limit_w) for s in second.gpus] == [
        (92, 239.52, 0), (0, 35.1, 0)]
    assert first.gpus == second.gpus
    # The refusal is learnt: the second heartbeat goes straight to the shorter list.
    assert fakesmi.calls(tmp_path / "bin").count(f"--query-gpu={SENSORS} {CSV}") == 1


def test_a_card_in_mig_mode_is_its_instances_sized_by_the_full_report(tmp_path, monkeypatch):
    fakesmi.install(tmp_path / "bin", fakesmi.A100_MIG)
    fakesmi.on_path(monkeypatch, tmp_path / "bin")
    _, gpus, _ = discovery(tmp_path).register_parts()
    assert [(g.index, g.uuid, g.memory_mb, g.mig.profile, g.mig.gpu_instance, g.mig.parent_index) for g in gpus] == [
        (1000, "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", 40192, "3g.40gb", 2, 0),
        (1001, "MIG-2a5b7e3c-8b1d-5f0e-a6c4-3d2e1f0a9b8c", 19968, "2g.20gb", 3, 0)]
    assert gpus[0].compute_capability == "8.0" and gpus[0].mig.parent_uuid.startswith("GPU-5d5ba0d6")


def test_a_driver_that_does_not_answer_is_said_in_the_hosts_gpu_note(tmp_path, monkeypatch):
    fakesmi.install(tmp_path / "bin", {f"--query-gpu={c} {CSV}": fakesmi.DRIVER_GONE for c in (CARDS, CARDS_OLD)})
    fakesmi.on_path(monkeypatch, tmp_path / "bin")
    host, gpus, _ = discovery(tmp_path).register_parts()
    assert gpus == []
    assert ("nvidia-smi failed (exit 9): "
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver") in host.gpu_note
    assert "libnvidia-ml.so.1" in host.gpu_note


def test_a_loaded_kernel_driver_without_its_tools_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    marker = tmp_path / "proc-driver-nvidia"
    marker.mkdir()
    host, gpus, _ = discovery(tmp_path, marker=str(marker)).register_parts()
    assert gpus == []
    assert "(/proc/driver/nvidia)" in host.gpu_note and "nvidia-smi is not installed" in host.gpu_note


def test_a_node_without_any_driver_has_no_gpus_and_nothing_to_say(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    host, gpus, _ = discovery(tmp_path).register_parts()
    assert gpus == [] and host.gpu_note == ""
    assert discovery(tmp_path).sample().gpus == []


def test_nvidia_smi_named_by_full_path_in_agent_yaml_is_the_one_run(tmp_path, monkeypatch):
    fakesmi.install(tmp_path / "opt", fakesmi.TWO_CARDS)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    settings = DiscoverySettings(dcgm_exporter="off", nvidia_smi=str(tmp_path / "opt" / "nvidia-smi"))
    _, gpus, _ = discovery(tmp_path, settings=settings).register_parts()
    assert len(gpus) == 2


def test_skip_gpus_does_not_run_nvidia_smi(tmp_path, monkeypatch):
    fakesmi.install(tmp_path / "bin", fakesmi.TWO_CARDS)
    fakesmi.on_path(monkeypatch, tmp_path / "bin")
    host, gpus, _ = discovery(tmp_path, settings=DiscoverySettings(skip_gpus=True)).register_parts()
    assert gpus == [] and fakesmi.calls(tmp_path / "bin") == []
