"""The unit files of systemd/, found wherever this program runs, and read for the supervised manager.

The files in systemd/ are the one source: dist copies them into the archive
(llmgw/onboard/units/), and a checkout reads them where they are. The
supervised manager reads the few [Service] keys it can honour without
systemd; everything else (the sandboxing) is systemd's alone.
"""

from __future__ import annotations

import re
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path

from llmgw.onboard.steps import StepFailed

PACKAGED = Path(__file__).resolve().parent / "units"
CHECKOUT = Path(__file__).resolve().parents[2] / "systemd"


def units_dir() -> Path:
    """Where this program's unit files are: inside the archive, else the checkout's systemd/."""
    for place in (PACKAGED, CHECKOUT):
        if place.is_dir() and any(place.glob("*.service")):
            return place
    raise StepFailed("install the service", f"this llmgw carries no unit files (neither {PACKAGED} nor {CHECKOUT} "
                                            "holds any); build the program with `python3 build.py dist`")


@dataclass(frozen=True)
class ServiceSpec:
    """What a supervisor needs of a unit's [Service] section, with systemd's defaults."""

    exec_start: list[str]
    restart: str = "no"
    restart_sec: float = 0.1
    kill_mode: str = "control-group"
    timeout_stop_sec: float = 90.0
    environment: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    group: str | None = None
    restart_prevent_exit_status: frozenset[int] = frozenset()
    # EnvironmentFile= in order, each (path, optional): a "-" before the path lets it be missing.
    environment_files: tuple[tuple[str, bool], ...] = ()


def sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """A unit file as {section: [(key, value), …]}; keys repeat (Environment=, After=), so a list, in order."""
    out: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = out.setdefault(line[1:-1], [])
            continue
        if current is None or "=" not in line:
            continue
        key, value = line.split("=", 1)
        current.append((key.strip(), value.strip()))
    return out


def _seconds(value: str, key: str, unit: str) -> float:
    text = value.strip()
    scale = 1.0
    for suffix, factor in (("ms", 0.001), ("min", 60.0), ("s", 1.0)):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    try:
        return float(text) * scale
    except ValueError:
        raise StepFailed("start the service", f"{unit}: {key}={value} is not a time the supervised manager reads; "
                                              "write it in seconds (2, 2s or 500ms)") from None


def specifiers(value: str, unit: str) -> str:
    """systemd's specifiers that Debian's units use (%p, %i, %n, %N, %H, %%), put in as systemd would.

    Debian's etcd.service reads EnvironmentFile=-/etc/default/%p: the
    three-machine store runs the packages' own units, under either manager."""
    name = unit.rsplit(".", 1)[0]
    prefix, _, instance = name.partition("@")
    values = {"p": prefix, "i": instance, "n": unit, "N": name, "H": socket.gethostname(), "%": "%"}
    return re.sub(r"%(.)", lambda m: values.get(m.group(1), m.group(0)), value)


def read_environment(text: str) -> dict[str, str]:
    """KEY=VALUE lines of an environment file, as systemd's EnvironmentFile= reads the simple ones."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";")) and "=" in line:
            key, _, value = line.partition("=")
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            out[key.strip()] = value
    return out


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_WORD_VARIABLE = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")


def expand(argv: list[str], env: dict[str, str]) -> list[str]:
    """ExecStart's variables as systemd puts them in: a word that is `$NAME` alone becomes the value's
    words (none when it is empty or unset); `${NAME}` anywhere in a word is the value as it is."""
    out: list[str] = []
    for word in argv:
        whole = _WORD_VARIABLE.match(word)
        if whole:
            out.extend(env.get(whole.group(1), "").split())
        else:
            out.append(_VARIABLE.sub(lambda m: env.get(m.group(1), ""), word))
    return out


def parse_service(text: str, unit: str) -> ServiceSpec:
    """The [Service] keys of `text` (the unit `unit`) that a supervisor honours."""
    service = sections(text).get("Service", [])
    values: dict[str, str] = {}
    environment: dict[str, str] = {}
    files: list[tuple[str, bool]] = []
    for key, raw in service:
        value = specifiers(raw, unit)
        if key == "Environment":
            for pair in shlex.split(value):
                name, _, setting = pair.partition("=")
                environment[name] = setting
        elif key == "EnvironmentFile":
            files.append((value.removeprefix("-"), value.startswith("-")))
        else:
            values[key] = value
    if "ExecStart" not in values:
        raise StepFailed("start the service", f"{unit} has no ExecStart= in its [Service] section; "
                                              "put the command to run there")
    # systemd's prefixes ("-", "@", "+", …) change how a command runs; none is used in systemd/.
    argv = shlex.split(values["ExecStart"].lstrip("-@+!:"))
    prevent = frozenset(int(word) for word in values.get("RestartPreventExitStatus", "").split() if word.isdigit())
    return ServiceSpec(
        exec_start=argv,
        restart=values.get("Restart", "no"),
        restart_sec=_seconds(values.get("RestartSec", "100ms"), "RestartSec", unit),
        kill_mode=values.get("KillMode", "control-group"),
        timeout_stop_sec=_seconds(values.get("TimeoutStopSec", "90"), "TimeoutStopSec", unit),
        environment=environment,
        user=values.get("User") or None,
        group=values.get("Group") or None,
        restart_prevent_exit_status=prevent,
        environment_files=tuple(files),
    )
