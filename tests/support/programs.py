"""Real llmgw.pyz programs for the upgrade tests: built once by build.py, then copied with another version.

`build_program(folder)` runs `python3 build.py dist` for this interpreter's
CPython alone (a minute or less); `rewritten(pyz, out, {name: bytes})` is a
copy with some of its entries replaced, the way a release differs from the
last: `with_version` changes llmgw.__version__, so the copy is a different
program (another sha256, another unpack directory) that says another version.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_program(folder: Path) -> Path:
    spec = importlib.util.spec_from_file_location("build_for_programs", ROOT / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    build.BUILD, build.DIST = folder / "build", folder / "dist"
    build.ensure_venv = lambda *a, **k: None  # the tests run in the venv already
    build.VENV_PYTHON = Path(sys.executable)
    assert build.cmd_dist(["--python", f"{sys.version_info[0]}.{sys.version_info[1]}"]) == 0
    return folder / "dist" / "llmgw.pyz"


def rewritten(pyz: Path, out: Path, replace: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(pyz) as source, open(out, "wb") as f:
        f.write(b"#!/usr/bin/env python3\n")
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                data = replace.get(info.filename, source.read(info.filename))
                target.writestr(info, data)
    out.chmod(0o755)
    return out


def with_version(pyz: Path, out: Path, version: str) -> Path:
    with zipfile.ZipFile(pyz) as zf:
        init = zf.read("lib/llmgw/__init__.py").decode()
    lines = [f'__version__ = "{version}"' if line.startswith("__version__") else line for line in init.splitlines()]
    return rewritten(pyz, out, {"lib/llmgw/__init__.py": ("\n".join(lines) + "\n").encode()})


def built_for(pyz: Path, out: Path, **changes: object) -> Path:
    with zipfile.ZipFile(pyz) as zf:
        doc = json.loads(zf.read("pyz-built-for.json"))
    doc.update(changes)
    return rewritten(pyz, out, {"pyz-built-for.json": json.dumps(doc).encode()})
