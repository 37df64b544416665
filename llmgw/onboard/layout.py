"""Where an install's files go, under a root: "/" on a real machine, a test's directory otherwise.

One object answers "where is agent.yaml" for the installer, the service
manager and the upgrade alike, so an install into `--root DIR` (the SSH
tests, a dry run on a laptop) lands every file under DIR and nothing on the
machine itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The paths of a real install, as systemd/*.service and docs/ name them.
PROGRAM = "/usr/local/bin/llmgw"
ETC = "/etc/llmgw"
SERVER_DATA = "/var/lib/llmgw"
AGENT_DATA = "/var/lib/llmgw-agent"
CACHE = "/var/cache/llmgw"
UNITS = "/etc/systemd/system"
RUN = "/run/llmgw"
LOGS = "/var/log/llmgw"


@dataclass(frozen=True)
class Layout:
    root: Path = Path("/")

    def __post_init__(self) -> None:
        # Relative roots would move with the working directory of whoever
        # reads the layout next (a supervisor runs from "/").
        object.__setattr__(self, "root", Path(self.root).resolve())

    @property
    def real(self) -> bool:
        """True for the machine itself ("/"), False for an install into a directory."""
        return self.root == Path("/")

    def at(self, path: str | Path) -> Path:
        """`/etc/llmgw` -> ROOT/etc/llmgw; a path already under the root is returned as it is."""
        path = Path(path)
        if not path.is_absolute():
            raise ValueError(f"{path} is not an absolute path")
        if self.real or path.is_relative_to(self.root):
            return path
        return self.root.joinpath(*path.parts[1:])

    @property
    def program(self) -> Path:
        return self.at(PROGRAM)

    @property
    def previous_program(self) -> Path:
        """The program before the last upgrade, kept beside it for a rollback."""
        return self.at(PROGRAM + ".previous")

    @property
    def etc(self) -> Path:
        return self.at(ETC)

    @property
    def server_config(self) -> Path:
        return self.etc / "server.yaml"

    @property
    def agent_config(self) -> Path:
        return self.etc / "agent.yaml"

    @property
    def mirror_config(self) -> Path:
        return self.etc / "mirror.yaml"

    @property
    def server_data(self) -> Path:
        return self.at(SERVER_DATA)

    @property
    def agent_data(self) -> Path:
        return self.at(AGENT_DATA)

    @property
    def cache(self) -> Path:
        """Where llmgw.pyz unpacks itself ($LLMGW_PYZ_CACHE) for the services of an install in a directory."""
        return self.at(CACHE)

    @property
    def units(self) -> Path:
        return self.at(UNITS)

    @property
    def run(self) -> Path:
        """The supervised manager's pid and state files."""
        return self.at(RUN)

    @property
    def logs(self) -> Path:
        """The supervised manager's UNIT.log files (systemd keeps its output in the journal instead)."""
        return self.at(LOGS)

    def unit_file(self, unit: str) -> Path:
        return self.units / unit
