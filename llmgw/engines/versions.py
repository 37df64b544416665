"""Whether an engine is installed, and which version: asked cheaply, without importing it.

Importing vLLM or SGLang imports torch and CUDA — seconds, and gigabytes of
address space — and an agent asks at every start. So a Python engine is
looked for with importlib.util.find_spec and its version read from its
package's metadata; one in another environment is asked through that
environment's interpreter, which reads the same metadata and imports nothing.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys

UNKNOWN = "unknown"
_TIMEOUT_S = 10.0


def which(program: str) -> str | None:
    """The program's path: as given when it is a path to an executable, else found on PATH."""
    if os.sep in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    return shutil.which(program)


def output(argv: list[str]) -> str | None:
    """What a program prints (stdout and stderr), or None when it does not run or fails."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return (done.stdout or "") + (done.stderr or "")


def module_version(module: str, distribution: str, python: str | None = None) -> str | None:
    """The installed version of a Python engine, by its top-level module and its distribution's name.

    `python` None is this interpreter; otherwise that one is asked, for an
    engine in an environment of its own.
    """
    if python is None or os.path.realpath(python) == os.path.realpath(sys.executable):
        try:
            if importlib.util.find_spec(module) is None:
                return None
        except (ImportError, ValueError):
            return None
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            return UNKNOWN
    code = ("import importlib.util as u, importlib.metadata as m, sys\n"
            f"if u.find_spec({module!r}) is None: sys.exit(3)\n"
            "try: print(m.version(sys.argv[1]))\n"
            "except m.PackageNotFoundError: print('unknown')\n")
    said = output([python, "-c", code, distribution])
    return said.strip().splitlines()[-1] if said and said.strip() else None


def script_python(script: str) -> str | None:
    """The interpreter a console script (vllm, trtllm-serve) runs with, from its #! line."""
    try:
        with open(script, "rb") as f:
            first = f.readline(512).decode("utf-8", errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env" and len(parts) > 1:
        return shutil.which(parts[1])
    return parts[0] if "python" in os.path.basename(parts[0]) else None


_VERSION_WORD = re.compile(r"\d+(\.\d+)+\S*|b\d+")


def said_version(text: str | None) -> str | None:
    """The version in what a program's --version printed: "version: 6123 (1a2b3c)" → "6123 (1a2b3c)"."""
    if text is None:
        return None
    for line in text.splitlines():
        line = line.strip()
        if line.lower().startswith("version:"):
            return line.split(":", 1)[1].strip() or UNKNOWN
    m = _VERSION_WORD.search(text)
    return m.group(0) if m else UNKNOWN


def is_python(binary: str) -> bool:
    """Whether a binary names a Python interpreter (python, python3, python3.12), not an engine's own program."""
    return re.fullmatch(r"python(\d+(\.\d+)?)?", os.path.basename(binary)) is not None
