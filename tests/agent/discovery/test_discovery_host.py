"""The machine itself: OS, processor, memory, and the filesystems the agent writes to."""

from __future__ import annotations

import os
import time

import psutil

from llmgw.agent.discovery import Discovery
from llmgw.agent.discovery.host import cpu_model, os_name, read_host
from llmgw.agent.discovery.storage import filesystems
from llmgw.config.agent import DiscoverySettings

ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
"""

X86_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9654 96-Core Processor
cache size\t: 1024 KB
processor\t: 1
model name\t: AMD EPYC 9654 96-Core Processor
"""


def test_the_host_is_this_machine():
    h = read_host()
    assert h.hostname and h.kernel == os.uname().release and h.arch == os.uname().machine
    assert h.cpu_threads == psutil.cpu_count() and 0 < h.cpu_cores <= h.cpu_threads
    assert h.memory_mb == psutil.virtual_memory().total // (1 << 20)
    assert h.cpu_model


def test_the_processor_is_named_as_cpuinfo_names_it_on_x86_and_arm(tmp_path):
    (tmp_path / "x86").write_text(X86_CPUINFO)
    (tmp_path / "arm").write_text(ARM_CPUINFO)
    assert cpu_model(str(tmp_path / "x86")) == "AMD EPYC 9654 96-Core Processor"
    assert cpu_model(str(tmp_path / "arm")) == "ARM implementer 0x41 part 0xd0c"


def test_the_os_is_named_by_os_release(tmp_path):
    (tmp_path / "os-release").write_text('NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    assert os_name(str(tmp_path / "os-release")) == "Debian GNU/Linux 12 (bookworm)"
    assert os_name(str(tmp_path / "missing")) == ""


def _other_filesystem(tmp_path) -> str:
    here = os.stat(tmp_path).st_dev
    for candidate in ("/dev/shm", "/run", "/proc"):
        if os.path.exists(candidate) and os.stat(candidate).st_dev != here:
            return candidate
    raise AssertionError("no second filesystem on this machine")


def test_two_directories_on_one_disk_are_one_storage_and_another_disk_is_another(tmp_path):
    cache, data = tmp_path / "weights", tmp_path / "state"
    cache.mkdir()
    other = _other_filesystem(tmp_path)
    got = filesystems([str(cache), str(data), other])  # data is not made yet: its parent's disk
    assert [s.path for s in got] == [str(cache), other]
    usage = psutil.disk_usage(str(tmp_path))
    assert got[0].total_bytes == usage.total and abs(got[0].free_bytes - usage.free) < 1 << 30
    assert got[0].device


def test_a_heartbeat_carries_load_memory_and_free_space_now(tmp_path):
    d = Discovery(DiscoverySettings(dcgm_exporter="off"), [str(tmp_path)], measure_bandwidth=False)
    d.register_parts()
    before = time.time()
    hb = d.sample()
    assert hb.at >= before and 0 <= hb.cpu_percent <= 100 and hb.load1 >= 0
    vm = psutil.virtual_memory()
    assert abs(hb.memory_available_mb - vm.available // (1 << 20)) < 512
    assert hb.memory_used_mb + hb.memory_available_mb <= vm.total // (1 << 20) + 1
    assert [s.path for s in hb.storage] == [str(tmp_path)] and hb.storage[0].free_bytes > 0
    assert hb.mem_bandwidth_gbs == 0  # not measured: it was turned off
