"""The first control plane's install on this machine: what the setup screens and `server init --install` both run.

In order: the program, the llmgw user and directories, server.yaml and
agent.yaml, the store seeded (first administrator and key), the server
started, the model mirror beside it, this machine joined as a node, its agent started, the firewall,
the starter model served, and a first answer asked of it. Each step looks
before it acts, so a second run changes nothing and says "unchanged"; each
reports Progress as it goes; a step that cannot be done raises StepFailed
with one sentence naming it and what to do.

The secrets made here (the administrator's password, the first API key)
come back in the Result, in memory; they are written nowhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llmgw.files import write_atomic
from llmgw.kb import where_line
from llmgw.onboard.layout import Layout
from llmgw.onboard.parts import Choices
from llmgw.onboard.services import ServiceManager, install_server_units
from llmgw.onboard.steps import Progress, StepFailed
from llmgw.onboard.supervisor import account_exists

SERVER_UNIT = "llmgw-server.service"
AGENT_UNIT = "llmgw-agent.service"
NODE_NAME_DEFAULT = ""  # the host name
# A real GGUF is fetched before its replica is ready: minutes on a slow line.
READY_WAIT_S = {"sim": 120.0, "llamacpp": 1800.0}
SERVER_WAIT_S = 60.0
NODE_WAIT_S = 60.0
POLL_S = 0.25

STEPS = ("program", "user", "bundle", "config", "store", "server", "mirror", "node", "agent", "firewall", "starter",
         "judge_nodes", "judge", "answer")
STEP_NAMES = {
    "program": "the program", "user": "the llmgw user and directories",
    "bundle": "the offline bundle", "config": "server.yaml and agent.yaml",
    "store": "the store", "server": "the control plane", "mirror": "the model mirror",
    "node": "this machine as a node",
    "agent": "the node's agent", "firewall": "the firewall", "starter": "the starter model",
    "judge_nodes": "the judges' machines", "judge": "the guardrails' judge", "answer": "a first answer",
}


@dataclass
class Result:
    portal: str
    client_api: str
    admin_email: str
    password: str | None = field(default=None, repr=False)
    """None when the store was set up before: a password is shown once, at its making."""
    api_key: str | None = field(default=None, repr=False)
    admin_token_file: str = ""
    model: str = ""
    answer: str = ""
    steps: dict[str, str] = field(default_factory=dict)
    knowledge: str = ""  # where knowledge bases live and what embeds them (llmgw.kb.where_line)
    judge: str = ""  # the judge model the baseline policy asks, when one was placed
    judge_speed: str = ""  # how its three timed judgments went, and what to do when they were slow (J8)


def dial(address: str) -> str:
    """HOST:PORT to reach a listener of this machine: every interface is reached on loopback."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::", "*"):  # noqa: S104 - read, not bound
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class FirstPlane:
    def __init__(self, choices: Choices, layout: Layout, services: ServiceManager,
                 report: Callable[[Progress], None], machine: str = "this machine", store: str = "",
                 name: str = "", address: str = "", mirror_peer: str = "", judge_nodes: list[Any] | None = None):
        self.choices = choices
        # The machines given for the judges alone (nodeadd.NodeAdd jobs, labelled llmgw.role=judge), added as
        # nodes before the judge is placed on them; their node records once they report.
        self.judge_nodes = judge_nodes or []
        self.judge_machines: list[dict[str, Any]] = []
        # Three machines: this machine's address as the other two reach it, and the second machine's
        # mirror, this one's peer. One machine: its own address on its default route, no peer.
        self.address = address
        self.mirror_peer = mirror_peer
        # Three machines: the store in PostgreSQL under Patroni (hainstall), and a name of the
        # three's for this control plane. One machine: SQLite in the data directory, the host's name.
        self.store = store
        self.name = name
        self.layout = layout
        self.services = services
        self.report = report
        self.machine = machine
        self.client = f"http://{dial(choices.listen['client'])}"
        self.admin = dial(choices.listen["admin"])
        self._bundle: Any = None
        self.result = Result(portal=f"{self.client}/", client_api=f"{self.client}/v1",
                             admin_email=choices.admin_email,
                             knowledge=where_line(store or f"sqlite:{layout.server_data / 'llmgw.db'}", ""))

    # -- running the steps

    def run(self) -> Result:
        # Steps that are a part's, skipped with it; every other step is always run.
        part_of = {"node": "node", "agent": "node", "firewall": "firewall", "mirror": "mirror", "starter": "starter",
                   "answer": "starter", "judge": "judge", "judge_nodes": "judge", "bundle": "bundle"}
        try:
            for step in STEPS:
                if step in part_of and not self.choices.is_on(part_of[step]):
                    continue
                if step == "judge_nodes" and not self.judge_nodes:
                    continue
                self._say(step, "doing", "")
                try:
                    state, sentence = getattr(self, f"step_{step}")()
                except StepFailed as e:
                    self._say(step, "failed", e.sentence)
                    raise
                self.result.steps[step] = state
                self._say(step, state, sentence)
        finally:
            if self._bundle is not None:
                shutil.rmtree(self._bundle.program.parent, ignore_errors=True)
        return self.result

    def _say(self, step: str, state: str, sentence: str) -> None:
        self.report(Progress(self.machine, step, state, sentence))

    def _fail(self, step: str, sentence: str) -> StepFailed:
        return StepFailed(step, f"{STEP_NAMES[step]}: {sentence}")

    # -- the steps, each (state, sentence)

    def unpacked(self) -> Any:
        """The offline bundle, unpacked once with every file checked against its sums (llmgw.release.Bundle)."""
        if self._bundle is None:
            import tempfile

            from llmgw.release import ReleaseError, open_bundle

            into = tempfile.mkdtemp(prefix="llmgw-bundle-")
            try:
                self._bundle = open_bundle(self.choices.bundle, into)
            except ReleaseError as e:
                shutil.rmtree(into, ignore_errors=True)
                raise self._fail("program", f"{e}.") from None
        return self._bundle

    def step_program(self) -> tuple[str, str]:
        target = self.layout.program
        if self.choices.is_on("bundle"):
            bundle = self.unpacked()
            content, what = bundle.program.read_bytes(), f"llmgw {bundle.version} from the bundle"
        else:
            content, what = program_bytes()
        if target.exists() and target.read_bytes() == content:
            return "unchanged", f"{target} is this program already"
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            shutil.copy2(target, target.with_name(target.name + ".previous"))
        tmp = target.with_name(target.name + ".new")
        tmp.write_bytes(content)
        tmp.chmod(0o755)
        tmp.replace(target)
        return "done", f"{what} installed as {target}"

    def step_bundle(self) -> tuple[str, str]:
        """The bundle's program and engine wheels held by the control plane, as `llmgw upgrade --from-bundle`
        holds them: a node asks for the wheels before it first installs llama.cpp's server, and takes them from
        here with `pip --no-index` (docs/upgrade.md, "The offline bundle")."""
        from llmgw.release import Program, Releases, sha256_of

        bundle = self.unpacked()
        releases = Releases(self.layout.server_data / "releases")
        digest = sha256_of(bundle.program)
        before = (releases.sha256(bundle.version), releases.wheels())
        releases.hold(Program(bundle.program, bundle.version, digest, {}))
        for wheel in bundle.wheels:
            releases.hold_wheel(wheel, wheel.name)
        if (releases.sha256(bundle.version), releases.wheels()) == before:
            return "unchanged", f"llmgw {bundle.version} and its engine wheels are held already"
        return "done", (f"llmgw {bundle.version} and {len(bundle.wheels)} engine wheel(s) held for the nodes, "
                        "every file matching its sha256")

    def step_user(self) -> tuple[str, str]:
        dirs = [self.layout.etc, self.layout.server_data, self.layout.agent_data, self.layout.run,
                self.layout.logs]
        made = [d for d in dirs if not d.exists()]
        for d in made:
            d.mkdir(parents=True, exist_ok=True)
        users = []
        if self.layout.real and os.geteuid() == 0:
            for user in ("llmgw", "llmgw-engine"):
                if account_exists(user):
                    continue
                done = subprocess.run(["useradd", "--system", "--home-dir", "/nonexistent", "--no-create-home",
                                       "--shell", "/usr/sbin/nologin", user], capture_output=True, text=True)
                if done.returncode != 0:
                    raise self._fail("user", f"useradd {user} failed ({done.stderr.strip()}); make the user "
                                             "by hand and run again.")
                users.append(user)
            shutil.chown(self.layout.server_data, "llmgw", "llmgw")
        if not made and not users:
            return "unchanged", "the user and directories are there"
        said = ", ".join(str(d) for d in made)
        return "done", (f"made {said}" if said else "") + (f"; users {', '.join(users)}" if users else "")

    def server_yaml(self) -> dict[str, Any]:
        c = self.choices
        doc: dict[str, Any] = {
            "data_dir": str(self.layout.server_data),
            "listen": dict(c.listen),
            "portal": {"language": c.language},
        }
        if self.name:
            doc["name"] = self.name
        if self.store:
            doc["store"] = self.store
        if c.max_key_ttl:
            doc["auth"] = {"max_key_ttl": c.max_key_ttl}
        if c.is_on("mirror"):
            # A cluster setting: it seeds a new store; step_mirror sets it in a store seeded before.
            doc["mirror"] = self.mirror_settings()
        return doc

    def mirror_url(self) -> str:
        from llmgw.onboard import mirrorpart

        return mirrorpart.url_for(self.choices.mirror_listen, self.address)

    def mirror_settings(self) -> dict[str, Any]:
        """The cluster's `mirror` settings: this machine's mirror first, the second machine's as its peer."""
        return {"url": self.mirror_url(), "peers": [self.mirror_peer] if self.mirror_peer else []}

    def agent_yaml(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "data_dir": str(self.layout.agent_data),
            "cache_dir": str(self.layout.at("/var/cache/llmgw/weights")),
            # One machine: engines answer only this machine's control plane.
            "advertise": "127.0.0.1",
        }
        if not self.layout.real:
            # A test's root has no llmgw-engine user: engines run as whoever runs the install.
            doc["engines"] = {"user": ""}
        return doc

    def step_config(self) -> tuple[str, str]:
        from llmgw.config import AgentConfig, ServerConfig, from_dict

        written = []
        for path, doc, kind in ((self.layout.server_config, self.server_yaml(), ServerConfig),
                                (self.layout.agent_config, self.agent_yaml(), AgentConfig)):
            if path.exists():
                continue  # never overwritten: run again, the settings page and ctl config change it
            from_dict(kind, doc)  # a bad choice is refused here, before anything is written
            path.parent.mkdir(parents=True, exist_ok=True)
            # 0640: server.yaml may hold the store's password (three machines); root's, read by llmgw's group.
            write_atomic(path, ("# Written by llmgw setup; keys: docs/reference.md\n"
                                + yaml.safe_dump(doc, sort_keys=False)).encode(), 0o640)
            if self.layout.real and account_exists("llmgw"):
                shutil.chown(path, "root", "llmgw")
            written.append(str(path))
        if not written:
            return "unchanged", "server.yaml and agent.yaml are there and kept as they are"
        return "done", f"wrote {', '.join(written)}"

    def server_config(self):
        from llmgw.config import load_server_config

        return load_server_config(str(self.layout.server_config))

    def step_store(self) -> tuple[str, str]:
        from llmgw.onboard.first_run import FirstWebhook, init_server

        cfg = self.server_config()
        self.result.admin_token_file = cfg.admin_token_path
        c = self.choices
        webhook = FirstWebhook(c.webhook, c.webhook_format, c.webhook_private) if c.is_on("notify") else None
        done = asyncio.run(init_server(cfg, admin_email=c.admin_email, project="Default/default/default",
                                       webhook=webhook))
        if self.layout.real and os.geteuid() == 0:
            # Seeded as root; the server runs as llmgw (the unit's User=) and must own its store and token.
            for top, dirs, files in os.walk(self.layout.server_data):
                for name in [*dirs, *files]:
                    shutil.chown(os.path.join(top, name), "llmgw", "llmgw")
        if done["already"]:
            return "unchanged", f"the store has its people already ({done['people']}); no secret is made again"
        self.result.password = done["administrator"]["password"]
        self.result.api_key = done["key"]["key"]
        return "done", f"first administrator {self.choices.admin_email} and a first API key made"

    def _admin(self):
        from llmgw.control import AdminClient

        return AdminClient(self.admin, self.result.admin_token_file or self.server_config().admin_token_path,
                           timeout=30)

    def step_server(self) -> tuple[str, str]:
        changed = install_server_units(self.services, SERVER_UNIT)
        before = self.services.status(SERVER_UNIT)
        if before.active and changed:
            self.services.restart(SERVER_UNIT)
        else:
            self.services.start(SERVER_UNIT)
        self._wait("server", SERVER_WAIT_S, lambda: _answers(self.client + "/health"),
                   f"it did not answer {self.client}/health in {SERVER_WAIT_S:.0f} s; "
                   f"its log is in {self.layout.logs}")
        if before.active and not changed:
            return "unchanged", f"running, answering {self.client}"
        return "done", f"started ({self.services.kind}), answering {self.client}"

    def step_mirror(self) -> tuple[str, str]:
        from llmgw.control import AdminError
        from llmgw.onboard import mirrorpart

        url = self.mirror_url()
        peers = [self.mirror_peer] if self.mirror_peer else []
        try:
            changed, said = mirrorpart.install(self.layout, self.services, self.choices.mirror_dir,
                                               self.choices.mirror_listen, peers)
            mirrorpart.wait_listening(dial(self.choices.mirror_listen))
        except StepFailed as e:
            raise self._fail("mirror", e.sentence.removeprefix(f"{mirrorpart.STEP}: ")) from None
        wanted = self.mirror_settings()
        try:
            admin = self._admin()
            current = admin.call("GET", "/api/v1/config", query={"path": "mirror"})["value"] or {}
            if {"url": current.get("url", ""), "peers": current.get("peers") or []} != wanted:
                admin.call("POST", "/api/v1/config",
                           {"set": {"mirror.url": wanted["url"], "mirror.peers": json.dumps(wanted["peers"])}})
                changed = True
                said += f"; the cluster's mirror.url is {url}"
        except AdminError as e:
            raise self._fail("mirror", f"the cluster's mirror settings could not be set ({e}); set them with "
                                       f"`llmgw ctl config set mirror.url {url}`.") from None
        return ("done" if changed else "unchanged"), said

    def step_node(self) -> tuple[str, str]:
        from llmgw.errors import ExpectedError
        from llmgw.trust import join

        if (self.layout.agent_data / "node.crt").exists():
            return "unchanged", "this machine has joined already"
        name = socket.gethostname()
        try:
            made = self._admin().call("POST", "/api/v1/nodes/join-codes",
                                      {"name": name, "ttl": "10m",
                                       "control_planes": [dial(self.choices.listen["agent"])]})
            joined = join(made["code"], str(self.layout.agent_data), str(self.layout.agent_config), name=name)
        except ExpectedError as e:
            raise self._fail("node", f"{e}.") from None
        return "done", f"joined as node {joined.name}"

    def step_agent(self) -> tuple[str, str]:
        changed = self.services.install(AGENT_UNIT)
        before = self.services.status(AGENT_UNIT)
        if before.active and changed:
            self.services.restart(AGENT_UNIT)
        else:
            self.services.start(AGENT_UNIT)
        name = socket.gethostname()

        def reported() -> bool:
            nodes = self._admin().call("GET", "/api/v1/nodes")
            return any(n.get("name") == name and n.get("state") == "ready" for n in nodes)

        self._wait("agent", NODE_WAIT_S, reported,
                   f"the agent did not report to the control plane in {NODE_WAIT_S:.0f} s; "
                   f"its log is in {self.layout.logs}")
        if before.active and not changed:
            return "unchanged", f"running; node {name} reports"
        return "done", f"started; node {name} reports to the control plane"

    def step_firewall(self) -> tuple[str, str]:
        import importlib.util

        if not self.layout.real:
            # nftables rules are the machine's own, whatever the root: an install into a directory
            # must not close the ports of the machine it runs on.
            raise self._fail("firewall", f"an install under {self.layout.root} cannot write this machine's "
                                         "firewall; leave the firewall out (--no-firewall).")
        if importlib.util.find_spec("llmgw.onboard.firewall") is None:
            raise self._fail("firewall", "this build has no firewall yet; run setup again with the firewall "
                                         "turned off (--no-firewall).")
        # The firewall's own command, as an administrator would run it: it writes the rule that keeps
        # this SSH connection before it closes anything.
        argv = [str(self.layout.program), "firewall", "on", "--config", str(self.layout.server_config)]
        if self.choices.is_on("node"):
            argv += ["--agent-config", str(self.layout.agent_config)]
        if self.choices.is_on("mirror"):
            # Its port open to the cluster; and, with a node here, its engines' egress kept to the mirrors.
            argv += ["--mirror-config", str(self.layout.mirror_config)]
            for url in [self.mirror_url(), *([self.mirror_peer] if self.mirror_peer else [])]:
                argv += ["--mirror", url]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip()).removeprefix("llmgw: ")
            raise self._fail("firewall", f"{said}; fix it and run again, or leave the firewall out "
                                         "(--no-firewall).")
        return "done", (done.stdout.strip().splitlines() or ["rules written"])[-1]

    def step_starter(self) -> tuple[str, str]:
        name, source, engine = self.choices.starter_source()
        self.result.model = name
        admin = self._admin()
        have = {m["name"]: m for m in admin.call("GET", "/api/v1/models")}
        if name not in have:
            body: dict[str, Any] = {"source": source, "engine": engine, "name": name}
            if engine != "sim":
                body["context"] = self.choices.starter_context
            admin.call("POST", "/api/v1/models/serve", body)
            added = True
        else:
            added = False
        self._wait_ready("starter", admin, name, engine)
        return ("done" if added else "unchanged"), f"{name} is served and ready"

    def step_judge_nodes(self) -> tuple[str, str]:
        """Each machine given for the judges installed as a node over SSH, labelled llmgw.role=judge (`llmgw node
        add --ssh --label llmgw.role=judge`), and reporting to the leader."""
        from llmgw.onboard.nodeadd import STEP_CHECK, add_node
        from llmgw.onboard.ssh import STEP_LOGIN

        admin = self._admin()
        changed = False

        def relay(progress: Progress) -> None:
            nonlocal changed
            # Logging in and checking the machine are "done" on every run: they change nothing there.
            changed = changed or (progress.state == "done" and progress.step not in (STEP_LOGIN, STEP_CHECK))
            self.report(progress)

        self.judge_machines = []
        for job in self.judge_nodes:
            try:
                node = asyncio.run(add_node(job, admin, relay))
            except StepFailed as e:
                raise self._fail("judge_nodes", f"{job.target.host}: {e.sentence}") from None
            self.judge_machines.append(admin.call("GET", f"/api/v1/nodes/{node['id']}"))
        said = ", ".join(f"{m['name']} ({m['cores']} cores, {m['memory_mb'] / 1024:.1f} GB)"
                         for m in self.judge_machines)
        return "done" if changed else "unchanged", f"{said}: nodes kept for the judges (llmgw.role=judge)"

    def step_judge(self) -> tuple[str, str]:
        """The judge sized for the machine (onboard.judge), or for the machines given for it, the baseline policy
        asking it, and its speed timed."""
        from llmgw.onboard.first_run import BASELINE
        from llmgw.onboard.judge import JUDGE, copies_on_each, judge_doc, judge_name, why_no_room

        key, copies = self.choices.judge_key(), self.choices.judge_copies()
        name, engine = judge_name(key), JUDGE[key].engine
        cpus, own = self.choices.cpus(), len(self.judge_machines)
        if own:
            on_each = copies_on_each(copies, own)
            for machine in self.judge_machines:
                why = None if engine == "sim" else why_no_room(machine["cores"], machine["memory_mb"] * 1024 ** 2,
                                                               0, on_each, machine["name"])
                if why:
                    raise self._fail("judge", f"{why}; give a larger machine for the judges, or fewer copies "
                                              "(--judge-replicas)")
            cpus = min(machine["cores"] for machine in self.judge_machines)
        admin = self._admin()
        added = name not in {m["name"] for m in admin.call("GET", "/api/v1/models")}
        if added:
            # Trusted on setup's word: the judge is a file this program names (onboard.judge), not one a person
            # typed; the pin still checks it against Hugging Face, and the origin and the audit log say who trusted.
            admin.call("POST", "/api/v1/models", {"spec": judge_doc(key, cpus=cpus, replicas=copies, own_nodes=own),
                                                  "trust": True})
        self._wait_ready("judge", admin, name, engine)
        # Named by the baseline policy only once it answers: under fail: closed a judge still loading would
        # refuse every request meanwhile.
        policy = (admin.call("GET", "/api/v1/config", query={"path": f"guard.policies.{BASELINE}"})["value"]
                  or {})
        named = (policy.get("judge") or {}).get("model")
        if named is None and policy:
            from llmgw.guard import baseline_policy

            asked = baseline_policy(name)
            admin.call("POST", "/api/v1/config", {"set": {
                f"guard.policies.{BASELINE}.judge": json.dumps(asked["judge"]),
                f"guard.policies.{BASELINE}.fail": asked["fail"]}})
        elif named is not None and named != name:
            self.result.judge = named
            return "unchanged", (f"{name} is served; the {BASELINE} policy asks {named}, as it was set, and is "
                                 "left so")
        self.result.judge = name
        self.result.judge_speed = self._time_judge(admin)
        state = "done" if added or named is None else "unchanged"
        return state, f"{name} is ready and the {BASELINE} policy asks it; {self.result.judge_speed}"

    def _time_judge(self, admin: Any) -> str:
        """Three judgments one after another, set against the policy's budget (the original's J8): a machine too
        slow for its judge is said so now, not at the first request it refuses."""
        from llmgw.control import AdminError
        from llmgw.onboard.first_run import BASELINE

        try:
            [check] = admin.call("POST", "/api/v1/guard/judges/check",
                                 {"policy": BASELINE, "alone": 3, "burst": 0})["checks"]
        except (AdminError, ValueError) as e:
            return f"its speed was not measured ({e}); llmgw ctl guard judge check measures it"
        times = ", ".join(f"{t:.1f}" for t in check["alone_s"]) or "none"
        said = f"three judgments took {times} s against a budget of {check['budget_s']:g} s"
        if check["state"] == "ok":
            return said
        return (f"{said}: too slow for this machine ({check['state']}); choose one of: "
                + "; ".join(check["advice"] or check["failures"]))

    def _wait_ready(self, step: str, admin: Any, name: str, engine: str) -> None:
        deadline = READY_WAIT_S.get(engine, 1800.0)
        said = [""]

        def ready() -> bool:
            replicas = admin.call("GET", "/api/v1/replicas", query={"model": name})
            if any(r.get("state") == "ready" for r in replicas):
                return True
            states = ", ".join(sorted({str(r.get("state")) for r in replicas})) or "waiting for a replica"
            if states != said[0]:
                said[0] = states
                self._say(step, "doing", f"{name}: {states}")
            return False

        self._wait(step, deadline, ready,
                   f"{name} has no ready replica after {deadline / 60:.0f} min; "
                   f"`llmgw ctl explain-placement {name}` says why")

    def step_answer(self) -> tuple[str, str]:
        if not self.result.api_key:
            return "unchanged", "no new API key this run (the store was set up before): no answer asked"
        name = self.result.model
        body = json.dumps({"model": name, "messages": [{"role": "user", "content": "Say hello."}],
                           "max_tokens": 16}).encode()
        request = urllib.request.Request(f"{self.client}/v1/chat/completions", data=body, method="POST", headers={  # noqa: S310 - self.client is http://
            "Authorization": f"Bearer {self.result.api_key}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as r:  # noqa: S310 - self.client is http://
                doc = json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise self._fail("answer", f"{name} answered {e.code}: {e.read()[:200]!r}.") from None
        except OSError as e:
            raise self._fail("answer", f"{self.client}/v1 did not answer ({e}).") from None
        text = ((doc.get("choices") or [{}])[0].get("message") or {}).get("content") or ""
        self.result.answer = text.strip()
        return "done", f"{name} answered: {self.result.answer[:60]}"

    # -- waiting on a condition

    def _wait(self, step: str, seconds: float, condition: Callable[[], bool], sentence: str) -> None:
        from llmgw.control import AdminError

        deadline = time.monotonic() + seconds
        while True:
            try:
                if condition():
                    return
            except AdminError:
                pass  # the admin API is still starting; asked again
            if time.monotonic() > deadline:
                raise self._fail(step, sentence)
            time.sleep(POLL_S)


def install(choices: Choices, layout: Layout, services: ServiceManager,
            report: Callable[[Progress], None]) -> Result:
    return FirstPlane(choices, layout, services, report).run()


def program_bytes() -> tuple[bytes, str]:
    """This program as a file to install: the llmgw.pyz it runs from, or a launcher for the Python it runs in."""
    import llmgw

    archive = os.environ.get("LLMGW_PYZ")
    if archive and os.path.isfile(archive):
        # Run from llmgw.pyz, which unpacks itself into a cache and says where it came from here.
        return Path(archive).read_bytes(), Path(archive).name
    here = Path(llmgw.__file__).resolve()
    for parent in here.parents:
        if parent.is_file():  # a zipapp: llmgw.pyz/llmgw/__init__.py
            return parent.read_bytes(), f"{parent.name}"
    package_parent = here.parent.parent
    script = ("#!/bin/sh\n"
              "# Written by llmgw setup: llmgw as it ran at install, from a checkout or a pip install\n"
              "# (not a llmgw.pyz); it runs that Python and that copy.\n"
              f"PYTHONPATH={_sh(str(package_parent))}${{PYTHONPATH:+:$PYTHONPATH}} "
              f"exec {_sh(sys.executable)} -m llmgw \"$@\"\n")
    return script.encode(), f"a launcher for {package_parent}"


def _sh(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - self.client's health, http://
            return bool(r.status == 200)
    except (OSError, ValueError):
        return False
