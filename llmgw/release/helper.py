"""The privileged half of a control plane's own upgrade, for machines where systemd runs it as `llmgw`.

`llmgw-server.service` runs the control plane as the `llmgw` user with
ProtectSystem=strict: it cannot replace /usr/local/bin/llmgw, which is
root's (and read-only to it). So it stages the program it fetched and
checked in DATA/releases/staged/ and writes DATA/releases/upgrade-request.json;
systemd's `llmgw-upgrade.path` sees the request and runs
`llmgw-upgrade.service` as root, which runs `llmgw upgrade-apply`:

1. the request read; the staged program must be a plain file inside
   DATA/releases/staged (no path out of it, no link), match the request's
   sha256, and be an llmgw.pyz for this machine (`check_program`);
2. the program put in place, the previous kept as llmgw.previous (swap.py);
3. the watchdog started from the previous program, naming the server's unit
   (it puts the previous back if the new one does not confirm in time);
4. the server's unit restarted, and the request removed.

The trust is the one that exists already: a control plane hands programs to
every node's agent, which runs as root and installs them.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from llmgw.files import write_atomic
from llmgw.release.program import ReleaseError, check_program, sha256_of
from llmgw.release.swap import install_program, previous_of
from llmgw.release.watchdog import start_watchdog

REQUEST = "upgrade-request.json"
FAILED = "upgrade-request.failed.json"
STAGED = "staged"
SERVER_UNIT = "llmgw-server.service"
# systemd's units for it (systemd/): the .path watches the request, the .service applies it.
HELPER_UNITS = ("llmgw-upgrade.service", "llmgw-upgrade.path")
HELPER_PATH_UNIT = Path("/etc/systemd/system/llmgw-upgrade.path")


def helper_installed() -> bool:
    return HELPER_PATH_UNIT.is_file()


@dataclass(frozen=True)
class Request:
    version: str
    sha256: str
    staged: str  # the staged program's file name, inside DATA/releases/staged
    confirm_within: float
    unit: str = SERVER_UNIT


def request_path(releases: Path) -> Path:
    return releases / REQUEST


def stage(releases: Path, program: Path, request: Request) -> Path:
    """The control plane's half: `program` (checked already) moved into the staged folder, then the request
    written whole (the .path unit fires on it, so it comes last)."""
    folder = releases / STAGED
    folder.mkdir(mode=0o750, parents=True, exist_ok=True)
    staged = folder / request.staged
    os.replace(program, staged)
    written = request_path(releases)
    write_atomic(written, (json.dumps(asdict(request)) + "\n").encode(), 0o640)
    return written


def read_request(releases: Path) -> tuple[Request, Path]:
    """The request and the staged program it names, both checked; ReleaseError saying what is wrong."""
    path = request_path(releases)
    try:
        doc = json.loads(path.read_text())
        request = Request(**{k: doc[k] for k in doc if k in Request.__dataclass_fields__})
        float(request.confirm_within)
    except FileNotFoundError:
        raise ReleaseError(f"there is no upgrade request at {path}; a control plane writes one when it is told "
                           "to upgrade and cannot replace its own program") from None
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ReleaseError(f"the upgrade request at {path} cannot be read ({e}); nothing was replaced") from None
    folder = (releases / STAGED).resolve()
    staged = releases / STAGED / request.staged
    if "/" in request.staged or request.staged in ("", ".", "..") or staged.resolve().parent != folder:
        raise ReleaseError(f"the upgrade request names {request.staged!r}, which is not a file of {folder}; "
                           "nothing was replaced")
    try:
        mode = os.lstat(staged).st_mode
    except FileNotFoundError:
        raise ReleaseError(f"the staged program {staged} is not there; tell the control plane to upgrade "
                           "again") from None
    if not stat.S_ISREG(mode):
        raise ReleaseError(f"the staged program {staged} is not a plain file (a link?); nothing was replaced")
    if request.unit not in (SERVER_UNIT,):
        raise ReleaseError(f"the upgrade request names the unit {request.unit!r}; only {SERVER_UNIT} is "
                           "upgraded this way")
    return request, staged


def apply(releases: Path, target: Path, data_dir: str, restart: Callable[[str], None],
          watchdog_extra: list[str] | None = None) -> str:
    """The root half: the staged program checked and put in place of `target`, the watchdog started, the
    unit restarted, the request removed. A sentence of what was done; ReleaseError when nothing was, and then
    the request is moved aside (upgrade-request.failed.json, with the reason), so that systemd's PathExists=
    does not run the helper on it again and again."""
    try:
        try:
            return _apply(releases, target, data_dir, restart, watchdog_extra)
        except OSError as e:
            # A disk that is full, a folder that went away: said as the rest, and the request moved aside
            # all the same, or PathExists= would start the helper on it again at once, again and again.
            raise ReleaseError(f"the upgrade could not be applied ({e}); see the state of {target} and "
                               f"{target.name}.previous, and tell the control plane to upgrade again") from None
    except ReleaseError as e:
        path = request_path(releases)
        if path.exists():
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                doc = {}
            write_atomic(releases / FAILED, (json.dumps({**doc, "error": str(e)}) + "\n").encode(), 0o640)
            path.unlink(missing_ok=True)
        raise


def _apply(releases: Path, target: Path, data_dir: str, restart: Callable[[str], None],
           watchdog_extra: list[str] | None) -> str:
    request, staged = read_request(releases)
    if sha256_of(staged) != request.sha256:
        raise ReleaseError(f"the staged program {staged} does not match the request's sha256 "
                           f"{request.sha256[:16]}…; nothing was replaced: tell the control plane to upgrade again")
    program = check_program(staged)
    if program.version != request.version:
        raise ReleaseError(f"the staged program is llmgw {program.version}, and the request is for "
                           f"{request.version}; nothing was replaced")
    install_program(target, staged, request.sha256)
    pid = start_watchdog(previous_of(target), target, request.version, data_dir, request.confirm_within,
                         ["--unit", request.unit, *(watchdog_extra or [])])
    request_path(releases).unlink(missing_ok=True)
    staged.unlink(missing_ok=True)
    restart(request.unit)
    return (f"llmgw {request.version} is in place of {target} (the previous kept as {target.name}.previous); "
            f"{request.unit} restarted, watched by pid {pid} for {request.confirm_within:g} s")


def can_replace(target: Path) -> bool:
    """Whether this process may put a file beside `target` (it cannot under ProtectSystem=strict, or as a user
    other than the directory's owner). Tried with a real file: root passes os.access on a read-only mount."""
    probe = target.with_name(f".{target.name}.probe-{os.getpid()}")
    try:
        with open(probe, "wb"):
            pass
    except OSError:
        return False
    probe.unlink(missing_ok=True)
    return True
