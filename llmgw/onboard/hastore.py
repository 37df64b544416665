"""One machine of the three-machine store, made: Debian's packages, then etcd's and Patroni's files, under a Layout.

`plan` is what the setup screens and `server init --ha` show before
anything is done; `write_machine` writes one machine's files and says, step
by step, what it did (`Progress`); `install_packages` runs apt-get where a
package is missing. Run again with the same machines and passwords, every
file is the same and each step says "unchanged".

Starting etcd and Patroni is the service manager's (Debian's etcd.service
and patroni.service on a real machine), after all three machines have their
files: etcd's first start waits for two of its three members.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from llmgw.config.storeaddress import redact_url
from llmgw.files import write_atomic
from llmgw.onboard import patroni
from llmgw.onboard.layout import Layout
from llmgw.onboard.patroni import PatroniPaths, StoreMachine, StoreSecrets
from llmgw.onboard.steps import Progress, StepFailed

# Debian 12's, for PostgreSQL 15 under Patroni with etcd beside it.
PACKAGES = ("etcd-server", "patroni", "python3-etcd", f"postgresql-{patroni.PG_VERSION}")
# Read by postgresql-common when the postgresql package is installed: without
# it, Debian makes a cluster called main and starts it on 5432, the port
# Patroni's PostgreSQL needs.
CREATECLUSTER_CONF = "/etc/postgresql-common/createcluster.conf"

Say = Callable[[Progress], None]


@dataclass(frozen=True)
class PlanLine:
    machine: str
    part: str
    detail: str


def plan(machines: list[StoreMachine], secrets_: StoreSecrets | None = None) -> list[PlanLine]:
    """What the three-machine store puts where, in the order it is done, for a person to read before it is."""
    patroni.check_machines(machines)
    lines = []
    for m in machines:
        lines.append(PlanLine(m.name, "packages", "installs " + ", ".join(
            PACKAGES if m.postgres else ("etcd-server",)) + " from Debian where missing"))
        others = ", ".join(o.name for o in machines if o is not m)
        lines.append(PlanLine(m.name, "etcd", f"member {m.name} of three, with {others}; clients on "
                                             f"{m.ports.etcd_client}, peers on {m.ports.etcd_peer}"))
        if m.postgres:
            lines.append(PlanLine(m.name, "PostgreSQL", f"PostgreSQL {patroni.PG_VERSION} under Patroni on "
                                                        f"{m.ports.postgres}, its REST API on {m.ports.patroni}; "
                                                        "primary or standby as Patroni decides"))
        else:
            lines.append(PlanLine(m.name, "PostgreSQL", "none here: etcd's third member and a control plane"))
    if secrets_ is not None:
        lines.append(PlanLine("all three", "store", redact_url(patroni.store_address(machines, secrets_))))
    lines.append(PlanLine("all three", "firewall",
                          "PostgreSQL, Patroni's REST API and etcd open to the cluster's networks only "
                          "(llmgw firewall on, docs/firewall.md)"))
    lines.append(PlanLine("all three", "timings",
                          f"leader key {patroni.TTL} s, checked every {patroni.LOOP_WAIT} s; "
                          "a commit waits for one standby (docs/ha.md#three-machines)"))
    return lines


def _owner(user: str) -> tuple[int, int] | None:
    """The uid and gid to give a file when running as root; None otherwise (a test, a dry run)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def _put(path: Path, text: str, mode: int, owner: tuple[int, int] | None) -> bool:
    """Write `path` whole when it differs; True if it changed."""
    data = text.encode("utf-8")
    if path.exists() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, mode, owner)
    return True


def paths_for(layout: Layout) -> PatroniPaths:
    return PatroniPaths(data_dir=str(layout.at(patroni.DATA_DIR)), bin_dir=patroni.BIN_DIR,
                        sockets=str(layout.at(patroni.SOCKETS)),
                        bootstrap_script=str(layout.at(patroni.BOOTSTRAP_SCRIPT)))


def write_machine(layout: Layout, machines: list[StoreMachine], me: StoreMachine, secrets_: StoreSecrets,
                  say: Say = lambda p: None, postgres_user: str = "postgres") -> None:
    """One machine's etcd environment, and where it carries PostgreSQL its patroni.yml, bootstrap script and
    llmgw's password, under `layout`. Files holding a password are 0600 and belong to the user Patroni runs as."""
    patroni.check_machines(machines)
    if me not in machines:
        raise StepFailed("the store's files", f"{me.name} is not one of the three machines given")

    def step(name: str, changed: bool) -> None:
        say(Progress(me.name, name, "done" if changed else "unchanged"))

    etcd_data = str(layout.at(patroni.ETCD_DATA_DIR))
    step("etcd's configuration", _put(layout.at(patroni.ETCD_ENVIRONMENT),
                                      patroni.etcd_environment(machines, me, etcd_data), 0o644, None))
    if not me.postgres:
        return
    owner = _owner(postgres_user)
    paths = paths_for(layout)
    config = yaml.safe_dump(patroni.patroni_config(machines, me, secrets_, paths), sort_keys=False)
    step("Patroni's configuration", _put(layout.at(patroni.PATRONI_CONFIG),
                                         "# Written by llmgw; written whole again by the next install.\n" + config,
                                         0o600, owner))
    password_file = layout.at(patroni.APP_PASSWORD_FILE)
    step("llmgw's store password", _put(password_file, secrets_.app + "\n", 0o600, owner))
    step("the store's first role and database",
         _put(Path(paths.bootstrap_script), patroni.bootstrap_script(str(password_file),
                                                                     os.path.join(paths.bin_dir, "psql")),
              0o700, owner))
    # PostgreSQL refuses a data directory others can read; Patroni makes the
    # directory itself, under a parent that must be its user's.
    for folder in (Path(paths.data_dir).parent, Path(paths.sockets)):
        folder.mkdir(mode=0o755 if folder == Path(paths.sockets) else 0o700, parents=True, exist_ok=True)
        if owner is not None:
            os.chown(folder, *owner)


def missing_packages(machine: StoreMachine) -> list[str]:
    """Of the packages this machine needs, those dpkg does not have installed."""
    wanted = PACKAGES if machine.postgres else ("etcd-server",)
    missing = []
    for package in wanted:
        done = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", package], capture_output=True, text=True)
        if done.returncode != 0 or "install ok installed" not in done.stdout:
            missing.append(package)
    return missing


def install_packages(layout: Layout, machine: StoreMachine, say: Say = lambda p: None) -> None:
    """apt-get install what is missing; on the machine itself only (never in a test's directory)."""
    step = "Debian's packages"
    if not layout.real:
        raise StepFailed(step, f"packages are installed on the machine itself, not under {layout.root}")
    missing = missing_packages(machine)
    if not missing:
        say(Progress(machine.name, step, "unchanged"))
        return
    if shutil.which("apt-get") is None:
        raise StepFailed(step, f"{', '.join(missing)} are missing and there is no apt-get here; this needs "
                               "Debian 12 or a machine with those packages installed")
    say(Progress(machine.name, step, "doing", "installing " + ", ".join(missing)))
    conf = layout.at(CREATECLUSTER_CONF)
    if not conf.exists():
        _put(conf, "# Written by llmgw: Patroni makes PostgreSQL's cluster, not the package.\n"
                   "create_main_cluster = false\n", 0o644, None)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *missing],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise StepFailed(step, f"apt-get could not install {', '.join(missing)} ({last}); run apt-get update, "
                               "or reach a Debian mirror, then run this again")
    say(Progress(machine.name, step, "done"))


def setup_machine(layout: Layout, machines: list[StoreMachine], me: StoreMachine, secrets_: StoreSecrets,
                  say: Say = lambda p: None) -> None:
    """The whole step for one machine: Debian's packages where missing (on the machine itself), then its files.

    Run on each of the three before etcd and Patroni are started on any:
    etcd's first start waits for two of its three members.
    """
    if layout.real:
        install_packages(layout, me, say)
    write_machine(layout, machines, me, secrets_, say)
