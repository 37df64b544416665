"""An llmgw.pyz checked before any machine runs it: its sha256, that it was built for this OS and architecture,
and that it starts and names its version.

A machine that is told to run a file that is not llmgw, or one whose native
modules do not load here, would go down at its restart; these checks run on
the control plane before the first machine is touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmgw.errors import ExpectedError

VERSION_WITHIN = 120.0  # seconds `python3 FILE --version` may take: the first start unpacks tens of MB
_VERSION = re.compile(r"llmgw (\S+)")


class ReleaseError(ExpectedError):
    """One sentence naming the file and what is wrong with it, and what to do."""


@dataclass(frozen=True)
class Program:
    path: Path
    version: str
    sha256: str
    built_for: dict[str, Any]


def sha256_of(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def running_program() -> Path:
    """The llmgw.pyz this process runs from ($LLMGW_PYZ, set by the archive's bootstrap), or a refusal.

    Only a program started from a pyz can replace itself: a checkout or a
    pip install is not one file a service manager starts again."""
    given = os.environ.get("LLMGW_PYZ", "")
    if not given or not Path(given).is_file():
        raise ReleaseError("this llmgw was not started from an llmgw.pyz ($LLMGW_PYZ is not set), so it cannot "
                           "replace itself; install it with `llmgw.pyz server install` or upgrade it by hand")
    return Path(given)


def _built_for(path: Path) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if "__main__.py" not in names or "pyz-built-for.json" not in names:
                raise ReleaseError(f"{path} is a zip archive but not an llmgw.pyz (it has no __main__.py or "
                                   "pyz-built-for.json); give the llmgw.pyz that `python3 build.py dist` made")
            built = json.loads(zf.read("pyz-built-for.json"))
    except zipfile.BadZipFile:
        raise ReleaseError(f"{path} is not an llmgw.pyz (not a zip archive); give the llmgw.pyz that "
                           "`python3 build.py dist` made, or an offline bundle") from None
    except ValueError:
        raise ReleaseError(f"{path}'s pyz-built-for.json is not JSON; build the program again with "
                           "`python3 build.py dist`") from None
    return built if isinstance(built, dict) else {}


def check_program(path: str | os.PathLike[str], python: str = sys.executable) -> Program:
    """The program at `path`, checked as the docstring above says, or ReleaseError."""
    path = Path(path)
    if not path.is_file():
        raise ReleaseError(f"there is no file {path}; give the path of an llmgw.pyz or an offline bundle, "
                           "or a version this control plane holds (`llmgw upgrade --list`)")
    built = _built_for(path)
    here = {"implementation": sys.implementation.name, "system": platform.system(), "machine": platform.machine()}
    if any(built.get(key) != value for key, value in here.items()):
        raise ReleaseError(f"{path} is built for {built.get('system')} {built.get('machine')} "
                           f"({built.get('implementation')}), and this cluster runs {here['system']} "
                           f"{here['machine']}; build it on a machine like these with `python3 build.py dist`")
    python_version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if python_version not in (built.get("pythons") or []):
        raise ReleaseError(f"{path} carries llmgw for CPython {', '.join(built.get('pythons') or ['none'])}, and "
                           f"the machines run {python_version}; build it with "
                           f"`python3 build.py dist --python {python_version}`")
    # -I: the program alone, not whatever PYTHONPATH this process was given.
    try:
        done = subprocess.run([python, "-I", str(path), "--version"], capture_output=True, text=True,
                              timeout=VERSION_WITHIN, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ReleaseError(f"{path} did not say its version within {VERSION_WITHIN:g} s "
                           "(`python3 FILE --version`); it is not a working llmgw, build it again") from None
    said = (done.stdout + done.stderr).strip()
    match = _VERSION.fullmatch(said.splitlines()[0]) if done.returncode == 0 and said else None
    if match is None:
        first = said.splitlines()[-1][:200] if said else "nothing"
        raise ReleaseError(f"{path} does not start here (`python3 FILE --version` exited {done.returncode} "
                           f"saying {first!r}); it is not a working llmgw, build it again")
    return Program(path, match.group(1), sha256_of(path), built)
