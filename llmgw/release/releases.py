"""The programs a control plane holds, by version: DATA/releases/VERSION/llmgw.pyz with its sha256 beside it.

An upgrade holds the program it was given before touching any machine, so
that standbys and nodes fetch it from a control plane (over the cluster's
mTLS port) and `llmgw upgrade VERSION` or `--rollback` can name it later.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from llmgw.release.program import Program, ReleaseError, sha256_of

PROGRAM_NAME = "llmgw.pyz"
WHEELS = "wheels"  # DATA/releases/wheels/NAME.whl with NAME.whl.sha256: the engine wheels of an offline bundle


class Releases:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path(self, version: str) -> Path:
        if not version or "/" in version or version.startswith("."):
            raise ReleaseError(f"{version!r} is not a version; give one like 0.2.0")
        return self.directory / version / PROGRAM_NAME

    def hold(self, program: Program) -> Program:
        """Keep `program` as its version's release (a copy, renamed into place); the held one is returned."""
        target = self.path(program.version)
        if target.exists() and self.sha256(program.version) == program.sha256:
            return Program(target, program.version, program.sha256, program.built_for)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(PROGRAM_NAME + ".partial")
        shutil.copyfile(program.path, partial)
        if sha256_of(partial) != program.sha256:
            partial.unlink()
            raise ReleaseError(f"{program.path} changed while it was copied into {target.parent}; give it again")
        partial.chmod(0o755)
        os.replace(partial, target)
        (target.parent / "sha256").write_text(program.sha256 + "\n")
        return Program(target, program.version, program.sha256, program.built_for)

    def sha256(self, version: str) -> str:
        try:
            return (self.path(version).parent / "sha256").read_text().strip()
        except OSError:
            return ""

    def find(self, version: str) -> Path | None:
        target = self.path(version)
        return target if target.is_file() and self.sha256(version) else None

    def versions(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        # Beside the versions: wheels/, and uploads and fetches under way (.upload-…, .incoming-wheels).
        return sorted(p.name for p in self.directory.iterdir()
                      if p.is_dir() and p.name != WHEELS and not p.name.startswith(".") and self.find(p.name))

    # the engine wheels an offline bundle brought, handed to the nodes with an upgrade

    def hold_wheel(self, path: Path, name: str) -> str:
        """Keep the wheel at `path` as `name`; its sha256."""
        if not name.endswith(".whl") or "/" in name or name.startswith("."):
            raise ReleaseError(f"{name!r} is not a wheel's file name (NAME-VERSION-TAGS.whl)")
        folder = self.directory / WHEELS
        folder.mkdir(parents=True, exist_ok=True)
        digest = sha256_of(path)
        partial = folder / (name + ".partial")
        shutil.copyfile(path, partial)
        os.replace(partial, folder / name)
        (folder / (name + ".sha256")).write_text(digest + "\n")
        return digest

    def wheels(self) -> dict[str, str]:
        """Each wheel held, by file name, with its sha256."""
        folder = self.directory / WHEELS
        if not folder.is_dir():
            return {}
        return {p.name: (folder / (p.name + ".sha256")).read_text().strip() for p in sorted(folder.glob("*.whl"))
                if (folder / (p.name + ".sha256")).is_file()}

    def wheel(self, name: str) -> Path | None:
        path = self.directory / WHEELS / name
        return path if name in self.wheels() else None
