"""One machine of the three-machine store, made: Debian's packages, then etcd's and Patroni's files, under a Layout.

`plan` is what the setup screens and `server init --ha` show before
anything is done; `write_machine` writes one machine's files and says, step
by step, what it did (`Progress`); `install_packages` runs apt-get where a
package is missing. Run again with the same machines and passwords, every
file is the same and each step says "unchanged".

`install_machine` is the whole of one machine's part, run on it (in
process on the machine that installs, `llmgw onboard store` on the other
two): the packages, the files, then etcd and Patroni started by the service
manager from Debian's own units (etcd.service, patroni.service), without
waiting for them: etcd's first start waits for two of its three members,
and Patroni waits for etcd. `formed` says when the store is one.
"""

from __future__ import annotations

import json
import os
import pwd
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llmgw.config import redact_url
from llmgw.files import write_atomic
from llmgw.onboard import debian, patroni
from llmgw.onboard.layout import Layout
from llmgw.onboard.patroni import PatroniPaths, StoreMachine, StorePorts, StoreSecrets
from llmgw.onboard.services import VENDOR_UNITS, ServiceManager, service_manager
from llmgw.onboard.steps import Progress, StepFailed, read_plan

# Debian 12's, for PostgreSQL 15 under Patroni with etcd beside it.
PACKAGES = ("etcd-server", "patroni", "python3-etcd", f"postgresql-{patroni.PG_VERSION}")
# Read by postgresql-common when the postgresql package is installed: without
# it, Debian makes a cluster called main and starts it on 5432, the port
# Patroni's PostgreSQL needs.
CREATECLUSTER_CONF = "/etc/postgresql-common/createcluster.conf"

Say = Callable[[Progress], None]
ETCD_UNIT = "etcd.service"
PATRONI_UNIT = "patroni.service"
STEP_START_ETCD = "start etcd"
STEP_START_PATRONI = "start Patroni"


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
    # etcd runs as etcd (its unit's User=) and makes its data directory under
    # this one, which Debian's package makes on the machine itself only.
    etcd_parent = Path(etcd_data).parent
    etcd_parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    etcd_owner = _owner("etcd")
    if etcd_owner is not None:
        os.chown(etcd_parent, *etcd_owner)
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


def wanted_packages(machine: StoreMachine) -> tuple[str, ...]:
    return PACKAGES if machine.postgres else ("etcd-server",)


def missing_packages(machine: StoreMachine) -> list[str]:
    """Of the packages this machine needs, those dpkg does not have installed."""
    return debian.missing(wanted_packages(machine))


def install_packages(layout: Layout, machine: StoreMachine, say: Say = lambda p: None) -> None:
    """apt-get install what is missing; on the machine itself only (never in a test's directory)."""
    def no_main_cluster() -> None:
        conf = layout.at(CREATECLUSTER_CONF)
        if not conf.exists():
            _put(conf, "# Written by llmgw: Patroni makes PostgreSQL's cluster, not the package.\n"
                       "create_main_cluster = false\n", 0o644, None)

    debian.install(layout, machine.name, wanted_packages(machine), say, before=no_main_cluster)


def setup_machine(layout: Layout, machines: list[StoreMachine], me: StoreMachine, secrets_: StoreSecrets,
                  say: Say = lambda p: None) -> None:
    """The whole step for one machine: Debian's packages where missing (on the machine itself), then its files.

    Run on each of the three before etcd and Patroni are started on any:
    etcd's first start waits for two of its three members.
    """
    if layout.real:
        install_packages(layout, me, say)
    write_machine(layout, machines, me, secrets_, say)


@dataclass(frozen=True)
class StorePlan:
    """What the installing machine sends each of the others on stdin: the three, which one it is, the
    store's passwords (never on a command line), and the service manager to use."""

    machines: list[dict[str, Any]]
    me: str
    secrets: dict[str, str] = field(repr=False)
    services: str | None = None

    @classmethod
    def make(cls, machines: list[StoreMachine], me: StoreMachine, secrets_: StoreSecrets,
             services: str | None) -> StorePlan:
        return cls([asdict(m) for m in machines], me.name,
                   {name: getattr(secrets_, name) for name in StoreSecrets.NAMES}, services)

    @classmethod
    def from_json(cls, text: str) -> StorePlan:
        return read_plan(cls, text, "llmgw server init --ha")

    def store_machines(self) -> list[StoreMachine]:
        return [StoreMachine(m["name"], m["address"], m.get("postgres", True), StorePorts(**m.get("ports", {})))
                for m in self.machines]

    def store_secrets(self) -> StoreSecrets:
        return StoreSecrets(**{name: self.secrets[name] for name in StoreSecrets.NAMES})


def start_services(layout: Layout, me: StoreMachine, manager: ServiceManager, changed: bool,
                   say: Say = lambda p: None) -> None:
    """etcd, and Patroni where this machine carries PostgreSQL, started (restarted when their files changed);
    not waited for: etcd's first start waits for a second member, Patroni for etcd."""
    units = [(STEP_START_ETCD, ETCD_UNIT)] + ([(STEP_START_PATRONI, PATRONI_UNIT)] if me.postgres else [])
    for step, unit in units:
        try:
            if manager.kind == "supervised":
                manager.install(unit)  # a copy of Debian's unit; systemd reads it where the package put it
            if not manager.status(unit).active:
                manager.start(unit, block=False)
                say(Progress(me.name, step, "done", f"{unit} started ({manager.kind})"))
            elif changed:
                manager.restart(unit)
                say(Progress(me.name, step, "done", f"{unit} restarted for its new files"))
            else:
                say(Progress(me.name, step, "unchanged", f"{unit} running"))
        except StepFailed as failed:
            raise StepFailed(step, f"{step}: {failed.sentence}") from None


def install_machine(layout: Layout, plan: StorePlan, say: Say = lambda p: None) -> dict[str, Any]:
    """One machine's whole part of the store: packages (on the machine itself), files, etcd and Patroni."""
    machines = plan.store_machines()
    me = next((m for m in machines if m.name == plan.me), None)
    if me is None:
        raise StepFailed("the store's files", f"{plan.me} is not one of the three machines in the plan")
    changes: list[Progress] = []

    def noted(progress: Progress) -> None:
        changes.append(progress)
        say(progress)

    setup_machine(layout, machines, me, plan.store_secrets(), noted)
    changed = any(p.state == "done" for p in changes)
    start_services(layout, me, service_manager(layout, plan.services, sources=VENDOR_UNITS), changed, say)
    return {"name": me.name, "postgres": me.postgres}


def main(root: str) -> int:
    """`llmgw onboard store`: the plan on stdin, progress as JSON lines, the result as the last line."""
    def say(progress: Progress) -> None:
        print(progress.line(), flush=True)

    machine = "this machine"
    try:
        plan = StorePlan.from_json(sys.stdin.readline())
        machine = plan.me
        done = install_machine(Layout(Path(root)), plan, say)
    except StepFailed as failed:
        say(failed.progress(machine))
        return 1
    except patroni.StoreSetupError as e:
        say(Progress(machine, "the store's files", "failed", str(e)))
        return 1
    print(json.dumps({"store": done}), flush=True)
    return 0


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=3) as answer:  # noqa: S310 - Patroni's API: Postgres.url(), http://
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def formed(machines: list[StoreMachine]) -> tuple[bool, str]:
    """Whether the store is one, as its configuration promises, and what it is short of, from Patroni's REST
    API: a primary, every PostgreSQL member running, and with two or more a synchronous standby named."""
    postgres = [m for m in machines if m.postgres]
    primary = next((m for m in postgres if _get(m.url(m.ports.patroni) + "/primary")[0] == 200), None)
    if primary is None:
        return False, "no PostgreSQL member is primary yet"
    _, cluster = _get(primary.url(primary.ports.patroni) + "/cluster")
    members = (cluster or {}).get("members", []) if isinstance(cluster, dict) else []
    running = [m["name"] for m in members if m.get("state") in ("running", "streaming")]
    if len(running) < len(postgres):
        return False, f"{primary.name} is primary; {len(running)} of {len(postgres)} members run"
    # With synchronous_mode a standby is named synchronous one loop after it first streams; before that no
    # member may be promoted, so the store is not yet what it promises.
    if len(postgres) > 1 and not any(m.get("role") == "sync_standby" for m in members):
        return False, f"{primary.name} is primary; no standby is synchronous yet"
    return True, f"{primary.name} is primary, {len(running) - 1} standby(s) streaming"
