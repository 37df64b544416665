"""`llmgw server init --install --ha`: three machines, each a control plane, on one store under Patroni.

In order, from the machine it runs on (the first of the three):
1. the store's passwords, made here once and kept under /etc/llmgw/store;
2. each machine's part of the store (hastore.install_machine): Debian's
   packages, etcd's and Patroni's files, etcd and Patroni started. Here in
   process; on the other two over SSH as `llmgw onboard store`, after the
   program is copied there (the same login, check and copy as `node add
   --ssh`);
3. a wait until PostgreSQL has a primary and a synchronous standby;
4. this machine's control plane on that store (firstplane: the store
   seeded, the server started, and the parts chosen);
5. the other two as standby control planes sharing its store and master
   key (serveradd, as `server add --ssh` does it);
6. with a floating address, keepalived on each of the three (floating.py),
   held by whichever control plane leads.

Every step reports Progress and can run again; a second run finds
everything in place and says "unchanged".
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from llmgw.config import MASTER_KEY_FILE, redact_url
from llmgw.onboard import floating, hastore, patroni
from llmgw.onboard.checks import Check
from llmgw.onboard.firstplane import FirstPlane, Result
from llmgw.onboard.layout import Layout
from llmgw.onboard.nodeadd import STEP_CHECK, NodeAdd, checked, prepare, program_file, run_there
from llmgw.onboard.parts import LISTEN_DEFAULTS, Choices
from llmgw.onboard.patroni import StoreMachine, StorePorts, StoreSecrets
from llmgw.onboard.serveradd import ServerAdd, add_server
from llmgw.onboard.services import service_manager
from llmgw.onboard.ssh import Credentials, Target
from llmgw.onboard.steps import Progress, StepFailed

STEP_STORE = "wait for the store"
STEP_REACH = "reach it"
ALL_THREE = "all three"
# initdb, the bootstrap and the synchronous standby's naming: about 20 s on
# loopback; the packages' install on a real machine comes before this wait.
STORE_WAIT_S = 300.0
HA_FILE_KEYS = {"name", "address", "ssh", "root", "postgres", "ports", "listen"}
JUDGE_FILE_KEYS = {"name", "ssh", "root", "role"}  # a machine for the judges alone: `role: judge`
MOST_JUDGE_MACHINES = 2

Report = Callable[[Progress], None]


@dataclass(frozen=True)
class HaMachine:
    """One of the three: its part of the store, how to log in (None for the machine this runs on), where
    its install goes, and its control plane's listeners where they are not the defaults."""

    store: StoreMachine
    ssh: Target | None = None
    root: str = "/"
    listen: dict[str, str] = field(default_factory=dict)
    mirror_listen: str = ""
    """Where its model mirror listens (machines.yaml's listen: mirror:), where not the setup's one choice: three
    machines on one host (a test, a trial) need a port each."""
    # Its own login, where the setup screens were given one per machine; else the job's.
    credentials: Credentials | None = field(default=None, repr=False)


@dataclass(frozen=True)
class JudgeMachine:
    """A machine for the guardrails' judges alone, added as a node labelled llmgw.role=judge (the original's J3)."""

    name: str
    ssh: Target
    root: str = "/"
    # The setup screens log in to it as to machine 2; from the command line, the job's one login.
    credentials: Credentials | None = field(default=None, repr=False)


@dataclass
class HaJob:
    machines: list[HaMachine]
    credentials: Credentials
    known_hosts: Path
    program: Path
    services: str | None = None
    wait: float = 120.0
    vip_interface: str | None = None  # where not the one that holds the route toward the floating address
    judges: list[JudgeMachine] = field(default_factory=list)

    def judge_jobs(self) -> list[NodeAdd]:
        """Each judge machine's `node add --ssh --label llmgw.role=judge`, with the three's login."""
        from llmgw.control import ROLE_LABEL
        from llmgw.onboard.judge import JUDGE_ROLE

        return [NodeAdd(target=j.ssh, credentials=j.credentials or self.credentials, known_hosts=self.known_hosts,
                        program=self.program, root=j.root, services=self.services, name=j.name, wait=self.wait,
                        labels={ROLE_LABEL: JUDGE_ROLE}) for j in self.judges]


def judges_from_hosts(given: list[str], port: int | None = None) -> list[JudgeMachine]:
    """`--judge-node USER@HOST` (up to two): named judge-1, judge-2."""
    if len(given) > MOST_JUDGE_MACHINES:
        raise StepFailed("the judges' machines", f"--judge-node is given {len(given)} times; up to "
                                                 f"{MOST_JUDGE_MACHINES} machines take the judges")
    return [JudgeMachine(f"judge-{i + 1}", Target.parse(text, port)) for i, text in enumerate(given)]


def address_toward(host: str) -> str:
    """The address this machine is reached at from `host`: the source the kernel picks for a route there
    (a UDP socket's connect sends nothing)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, 9))
        except OSError as e:
            raise StepFailed("the three machines", f"this machine has no route to {host} ({e.strerror}); give "
                                                   "--address with the address the other two reach it at"
                                                   ) from None
        return str(probe.getsockname()[0])


def from_hosts(others: list[str], address: str | None, port: int | None = None) -> list[HaMachine]:
    """`--ha USER@HOST2,USER@HOST3`: this machine first, the three named cp-1, cp-2, cp-3, Debian's ports."""
    if len(others) != 2:
        raise StepFailed("the three machines", f"--ha names the other two machines, given {len(others)}: "
                                               "write --ha root@10.0.0.7,root@10.0.0.8")
    targets = [Target.parse(text, port) for text in others]
    here = address or address_toward(targets[0].host)
    machines = [HaMachine(StoreMachine("cp-1", here))]
    machines += [HaMachine(StoreMachine(f"cp-{i + 2}", resolve(t.host)), ssh=t) for i, t in enumerate(targets)]
    patroni.check_machines([m.store for m in machines])
    return machines


def resolve(host: str) -> str:
    """`host` as an IP address: the store's members let one another in by address (pg_hba.conf)."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        raise StepFailed("the three machines", f"{host} does not resolve to an address; give its IP address"
                                               ) from None
    return str(sorted(found, key=lambda f: f[0] != socket.AF_INET)[0][4][0])


def from_choices(choices: Choices) -> list[HaMachine]:
    """The setup screens' three: this machine, and the other two as the screens were told to log in to them."""
    machines = []
    for i, m in enumerate(choices.others):
        target = Target.parse(f"{m.user or 'root'}@{m.address}")
        login = Credentials(m.key_path if m.auth == "key" else None,
                            m.password if m.auth == "password" else None,
                            m.sudo_password or (m.password if m.auth == "password" else None))
        machines.append(HaMachine(StoreMachine(f"cp-{i + 2}", resolve(target.host)), ssh=target, credentials=login))
    here = HaMachine(StoreMachine("cp-1", address_toward(machines[0].store.address)), root=choices.root)
    patroni.check_machines([here.store] + [m.store for m in machines])
    return [here, *machines]


async def check_there(job: HaJob, machine: HaMachine) -> str:
    """One of the other two checked before anything is installed, as the install's first two steps do it:
    logged in (its host key recorded), root through sudo if need be, a python3 the program carries. What was
    found, as a sentence; StepFailed says what is wrong."""
    assert machine.ssh is not None
    there = NodeAdd(target=machine.ssh, credentials=machine.credentials or job.credentials,
                    known_hosts=job.known_hosts, program=job.program, root=machine.root)
    said: list[Progress] = []
    session, _ = await checked(there, said.append)
    try:
        targets = peers([m.store for m in job.machines], machine.store)
        done = await session.conn.run(shlex.join(["python3", "-c", REACH_PROBE, *targets]), check=False)
        try:
            results = json.loads(str(done.stdout or "").strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise StepFailed(STEP_CHECK, f"{machine.store.name} could not try the others' etcd ports "
                                         f"({str(done.stderr or '').strip() or f'exit status {done.exit_status}'})"
                                         ) from None
    finally:
        session.close()
    return "; ".join([*(p.sentence for p in said if p.state == "done"), reached(machine.store.name, targets, results)])


async def check_judge_machine(there: NodeAdd) -> str:
    """A judge machine logged in to and checked before anything is installed, as `node add --ssh` begins."""
    said: list[Progress] = []
    session, _ = await checked(there, said.append)
    session.close()
    return "; ".join(p.sentence for p in said if p.state == "done")


# Run on each of the three (python3 -c, as the login, no root needed): each ADDRESS:PORT given tried once.
# "refused" is reached: the machine answered that nothing listens there yet, which is so before the install.
REACH_PROBE = r"""
import json, socket, sys
out = {}
for target in sys.argv[1:]:
    host, _, port = target.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=3).close()
        out[target] = "open"
    except ConnectionRefusedError:
        out[target] = "refused"
    except OSError as e:
        out[target] = e.strerror or type(e).__name__
print(json.dumps(out))
"""


def peers(machines: list[StoreMachine], me: StoreMachine) -> dict[str, str]:
    """The other two's etcd peer ports (the first thing the three say to one another), by machine name."""
    return {m.host(m.ports.etcd_peer): m.name for m in machines if m is not me}


def reached(name: str, targets: dict[str, str], results: dict[str, str]) -> str:
    """The sentence for what `name` reached; StepFailed naming the first it could not."""
    for target, other in targets.items():
        result = results.get(target, "not tried")
        if result not in ("open", "refused"):
            raise StepFailed(STEP_CHECK, f"{name} cannot reach {other} at {target} ({result}); the three must "
                                         "reach one another on etcd's, Patroni's and PostgreSQL's ports: a "
                                         "firewall between them, or a wrong address?")
    return f"reaches {' and '.join(targets.values())}"


def reach_from_here(machines: list[StoreMachine]) -> str:
    """This machine's half of the same check, run here."""
    targets = peers(machines, machines[0])
    done = subprocess.run([sys.executable, "-c", REACH_PROBE, *targets], capture_output=True, text=True,
                          timeout=60)
    return reached(machines[0].name, targets, json.loads(done.stdout.strip().splitlines()[-1]))


def job_from_choices(choices: Choices) -> HaJob:
    """The setup screens' three as a job: the program this runs from (llmgw.pyz) copied to the other two,
    their host keys kept beside the admin token."""
    layout = Layout(Path(choices.root))
    machines = from_choices(choices)
    # The judges' machines are logged in to as machine 2 is (the screens ask only their USER@HOST[:PORT]).
    judges = [replace(judge, credentials=machines[1].credentials) for judge in judges_from_hosts(choices.judge_nodes)]
    return HaJob(machines=machines, credentials=Credentials(None, None, None),
                 known_hosts=layout.server_data / "known_hosts", program=program_file(None),
                 services=choices.services, judges=judges)


def check_others(choices: Choices) -> list[Check]:
    """The setup screens' checks of the other two and the judges' machines: "reach" for each, as the install will
    log in."""
    try:
        job = job_from_choices(choices)
    except StepFailed as e:
        return [Check(m.label(), "reach", "fail", e.sentence) for m in choices.others]
    except patroni.StoreSetupError as e:
        return [Check("the three", "reach", "fail", f"{e}.")]
    found = []
    try:
        found.append(Check("this machine", "reach", "ok", reach_from_here([m.store for m in job.machines])))
    except StepFailed as e:
        found.append(Check("this machine", "reach", "fail", e.sentence))
    for machine, chosen in zip(job.machines[1:], choices.others, strict=True):
        try:
            found.append(Check(chosen.label(), "reach", "ok", asyncio.run(check_there(job, machine))))
        except StepFailed as e:
            found.append(Check(chosen.label(), "reach", "fail", e.sentence))
    for there, given in zip(job.judge_jobs(), choices.judge_nodes, strict=True):
        try:
            found.append(Check(given, "reach", "ok", asyncio.run(check_judge_machine(there))))
        except StepFailed as e:
            found.append(Check(given, "reach", "fail", e.sentence))
    return found


def install_three(choices: Choices, report: Report) -> Result:
    """What the setup screens run for three machines: install_ha, this machine's Result."""
    done = asyncio.run(install_ha(choices, job_from_choices(choices), report))
    result: Result = done["result"]
    return result


def from_file(path: Path) -> tuple[list[HaMachine], list[JudgeMachine]]:
    """`--machines FILE`: the three as a YAML list, this machine first (no ssh:), each with its name and
    address and, where they are not the defaults, its store's ports, install root and listeners; after them,
    up to two machines for the judges alone (`role: judge`, with name, ssh and root)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise StepFailed("the three machines", f"--machines {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise StepFailed("the three machines", f"--machines {path} is not YAML ({e})") from None
    if not isinstance(doc, list) or not all(isinstance(m, dict) for m in doc):
        raise StepFailed("the three machines", f"--machines {path}: write a list of three machines, each with "
                                               "name:, address: and (but for this one) ssh: USER@HOST")
    machines, judges = [], []
    for i, entry in enumerate(doc):
        if "role" in entry:
            judges.append(_judge_entry(path, i, entry))
            continue
        unknown = sorted(set(entry) - HA_FILE_KEYS)
        if unknown:
            raise StepFailed("the three machines", f"--machines {path}: machine {i + 1} has {', '.join(unknown)}, "
                                                   f"which is not one of {', '.join(sorted(HA_FILE_KEYS))}")
        try:
            store = StoreMachine(str(entry["name"]), str(entry["address"]), bool(entry.get("postgres", True)),
                                 StorePorts(**(entry.get("ports") or {})))
        except (KeyError, TypeError) as e:
            raise StepFailed("the three machines", f"--machines {path}: machine {i + 1} lacks or misnames "
                                                   f"{e}; each has name: and address:, and ports: of postgres, "
                                                   "patroni, etcd_client, etcd_peer") from None
        ssh = entry.get("ssh")
        if (i == 0) != (ssh is None):
            raise StepFailed("the three machines", f"--machines {path}: the first machine is this one, with no "
                                                   "ssh:; the other two each need ssh: USER@HOST[:PORT]")
        listen = {str(k): str(v) for k, v in (entry.get("listen") or {}).items()}
        bad = sorted(set(listen) - set(LISTEN_DEFAULTS) - {"mirror"})
        if bad:
            raise StepFailed("the three machines", f"--machines {path}: listen: {', '.join(bad)} is not one of "
                                                   f"{', '.join([*LISTEN_DEFAULTS, 'mirror'])}")
        mirror_listen = listen.pop("mirror", "")
        machines.append(HaMachine(store, Target.parse(str(ssh)) if ssh else None, str(entry.get("root") or "/"),
                                  listen, mirror_listen))
    patroni.check_machines([m.store for m in machines])
    if len(judges) > MOST_JUDGE_MACHINES:
        raise StepFailed("the three machines", f"--machines {path} gives {len(judges)} machines with role: judge; "
                                               f"up to {MOST_JUDGE_MACHINES} take the judges")
    return machines, judges


def _judge_entry(path: Path, i: int, entry: dict[str, Any]) -> JudgeMachine:
    unknown = sorted(set(entry) - JUDGE_FILE_KEYS)
    if entry["role"] != "judge" or unknown or not entry.get("ssh") or not entry.get("name"):
        raise StepFailed("the three machines", f"--machines {path}: machine {i + 1} is not the three's, and a "
                                               "machine for the judges has role: judge, name: and ssh: USER@HOST"
                                               "[:PORT] (and root: where not /), nothing else")
    return JudgeMachine(str(entry["name"]), Target.parse(str(entry["ssh"])), str(entry.get("root") or "/"))


async def install_ha(choices: Choices, job: HaJob, report: Report) -> dict[str, Any]:
    """The three machines installed, each a control plane; this machine's Result and the standbys'."""
    here = job.machines[0]
    layout = Layout(Path(choices.root))
    machines = [m.store for m in job.machines]
    # Both others reached before anything is done here: a machine that cannot be logged in to stops the
    # install with nothing started on any.
    report(Progress(here.store.name, STEP_REACH, "done", await asyncio.to_thread(reach_from_here, machines)))
    for machine in job.machines[1:]:
        assert machine.ssh is not None
        report(Progress(machine.store.name, STEP_REACH, "done", await check_there(job, machine)))
    for there in job.judge_jobs():
        report(Progress(there.name or there.target.host, STEP_REACH, "done", await check_judge_machine(there)))
    secrets_ = StoreSecrets.load_or_make(layout.at(patroni.SECRETS_DIR))

    plan = hastore.StorePlan.make(machines, here.store, secrets_, choices.services)
    await asyncio.to_thread(hastore.install_machine, layout, plan, report)
    for machine in job.machines[1:]:
        await _store_there(job, machine, hastore.StorePlan.make(machines, machine.store, secrets_, job.services),
                           report)
    await _wait_formed(machines, report)

    url = patroni.store_address(machines, secrets_)
    # The model mirror on the first machine and the second, each the other's peer; the third has none.
    mirrors = mirror_urls(choices, job.machines)
    plane = FirstPlane(choices, layout, service_manager(layout, choices.services), report,
                       machine=here.store.name, store=url, name=here.store.name, address=here.store.address,
                       mirror_peer=mirrors[1] if mirrors else "", judge_nodes=job.judge_jobs())
    result: Result = await asyncio.to_thread(plane.run)
    if choices.vip:
        await asyncio.to_thread(floating.setup, layout, choices.vip, job.vip_interface, choices.listen["client"],
                                choices.services, here.store.name, report)

    master_key = (layout.server_data / MASTER_KEY_FILE).read_bytes()
    standbys = []
    for i, machine in enumerate(job.machines[1:], start=1):
        assert machine.ssh is not None
        mirror = ({"dir": choices.mirror_dir, "listen": machine.mirror_listen or choices.mirror_listen,
                   "peers": [mirrors[0]]} if mirrors and i == 1 else {})
        standby = ServerAdd(target=machine.ssh, credentials=machine.credentials or job.credentials,
                            known_hosts=job.known_hosts,
                            program=job.program, root=machine.root, services=job.services, name=machine.store.name,
                            wait=job.wait, store=url, master_key=master_key, listen=machine.listen,
                            vip=choices.vip, vip_interface=job.vip_interface, mirror=mirror)
        standbys.append(await add_server(standby, report))
    return {"result": result, "standbys": standbys, "store": redact_url(url)}


def mirror_urls(choices: Choices, machines: list[HaMachine]) -> list[str]:
    """The two mirrors' addresses, the first machine's first; [] when the mirror is left out."""
    from llmgw.onboard import mirrorpart

    if not choices.is_on("mirror"):
        return []
    return [mirrorpart.url_for(m.mirror_listen or choices.mirror_listen, m.store.address) for m in machines[:2]]


async def _store_there(job: HaJob, machine: HaMachine, plan: hastore.StorePlan, report: Report) -> None:
    assert machine.ssh is not None
    there = NodeAdd(target=machine.ssh, credentials=machine.credentials or job.credentials,
                    known_hosts=job.known_hosts, program=job.program, root=machine.root, services=job.services,
                    name=machine.store.name)
    layout = Layout(Path(machine.root))
    session, _ = await prepare(there, layout, report, report)
    try:
        await run_there(session, there, layout, "store", plan.__dict__, report)
    finally:
        session.close()


async def _wait_formed(machines: list[StoreMachine], report: Report) -> None:
    report(Progress(ALL_THREE, STEP_STORE, "doing", "PostgreSQL's primary and synchronous standby"))
    deadline = time.monotonic() + STORE_WAIT_S
    while True:
        done, said = await asyncio.to_thread(hastore.formed, machines)
        if done:
            report(Progress(ALL_THREE, STEP_STORE, "done", said))
            return
        if time.monotonic() >= deadline:
            raise StepFailed(STEP_STORE, f"the store did not form in {STORE_WAIT_S:.0f} s ({said}); see Patroni's "
                                         "and etcd's logs on the three (journalctl -u patroni -u etcd)")
        await asyncio.sleep(1.0)
