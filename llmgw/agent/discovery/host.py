"""What the machine is: its OS, kernel, architecture, processor and memory."""

from __future__ import annotations

import os
import platform
import socket

import psutil

from llmgw.protocol import Host

MB = 1024 * 1024


def read_host(proc: str = "/proc", etc: str = "/etc") -> Host:
    """The machine as the control plane places work on it; GPUs and bandwidth are filled in elsewhere."""
    uname = platform.uname()
    return Host(
        hostname=socket.gethostname(),
        os=os_name(os.path.join(etc, "os-release")) or uname.system,
        kernel=uname.release,
        arch=uname.machine,
        cpu_model=cpu_model(os.path.join(proc, "cpuinfo")),
        # psutil says None where it cannot count physical cores (some VMs, containers
        # without /sys): the logical count is then the honest lower bound of what runs.
        cpu_cores=psutil.cpu_count(logical=False) or psutil.cpu_count() or 0,
        cpu_threads=psutil.cpu_count() or 0,
        memory_mb=psutil.virtual_memory().total // MB,
    )


def os_name(path: str) -> str:
    """PRETTY_NAME from os-release ("Debian GNU/Linux 12 (bookworm)"), "" when there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key == "PRETTY_NAME":
                    return value.strip().strip('"').strip("'")
    except OSError:
        pass
    return ""


def cpu_model(path: str) -> str:
    """The processor's name as /proc/cpuinfo gives it.

    x86 says "model name"; ARM servers often say nothing of the kind and
    name only the implementer and part, and some say "Model" or
    "Hardware" instead. psutil does not read any of these.
    """
    fields: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                key = key.strip()
                if sep and key and key not in fields:
                    fields[key] = value.strip()
    except OSError:
        return platform.processor()
    for key in ("model name", "Model", "cpu model", "Hardware", "cpu"):
        if fields.get(key):
            return fields[key]
    if fields.get("CPU implementer"):
        return f"ARM implementer {fields['CPU implementer']} part {fields.get('CPU part', '?')}"
    return platform.processor()
