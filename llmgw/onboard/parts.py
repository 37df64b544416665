"""What an install is made of: its parts, the choices made about them, the plan, and the same as a command.

The setup screens and `llmgw server init --install` read the same table, so
that what a person picks on a screen and what a script passes as flags are
one install: the plan's last line is the command that repeats it.

Parts this program does not have yet, or has but setup does not place (ComfyUI, for pictures and 3D), are listed so
that nobody looks for them in vain, marked as such, and cannot be turned on.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from llmgw.errors import ExpectedError
from llmgw.onboard.defaults import LISTEN_DEFAULTS, MIRROR_DIR, MIRROR_LISTEN, STARTERS


@dataclass(frozen=True)
class Part:
    key: str
    name: str
    what: str
    """What it is for, in one line."""
    without: str
    """What is missing when it is off (empty for a part that is always there)."""
    always: bool = False
    built: bool = True
    """False: the design names it, this program does not have it yet (docs/not-yet-built.md)."""
    one_machine_only: bool = False
    three_machines_only: bool = False
    settings: str = ""
    """What Enter lets you set, said in the settings dialog."""
    missing: str = "not built yet"
    """What a part that is not `built` is, on the list: not in the program, or in it but not placed by setup."""
    docs: str = ""
    """For a part in the program but not placed by setup: the page that says how to add it afterwards."""


PARTS: tuple[Part, ...] = (
    Part("control", "Control plane",
         "the client API (/v1), the portal and the admin API",
         "", always=True,
         settings="The first administrator's e-mail and the portal's language."),
    Part("store", "Store",
         "the cluster's people, keys, models and usage",
         "", always=True,
         settings="One machine keeps its store in SQLite under /var/lib/llmgw. With three machines, "
                  "PostgreSQL under Patroni on all three."),
    Part("all_three", "Control plane on all three",
         "any one of the three machines can be lost",
         "the gateway stops with the first machine", three_machines_only=True,
         settings="A floating address that follows whichever control plane leads (e.g. 10.0.0.160/24)."),
    Part("mirror", "Model mirror",
         "fetches each model from Hugging Face once and serves the nodes",
         "each node fetches its own weights",
         settings="The mirror runs on this machine and keeps the files in a folder of its own: put it on the "
                  "largest disk. Nodes then fetch weights from it only, never from the internet. With three "
                  "machines, a second mirror on the second machine keeps in step with the first."),
    Part("node", "This machine as a node",
         "this machine runs models, not only routes to them",
         "nothing serves a model until a node joins (llmgw node add)",
         settings="This machine's agent joins the control plane with a one-time code and runs the engines."),
    Part("starter", "Starter model",
         "a model that answers as soon as setup ends",
         "/chat has no model to offer until one is added",
         settings="Which model: a simulated one that needs no internet and no weights, a Qwen GGUF from "
                  "Hugging Face, or any GGUF there (hf:OWNER/REPO/FILE.gguf); and its context in tokens."),
    # Setup cannot place ComfyUI: it is on no package registry and has no wheel, so it is installed on a node by
    # hand. Once a node names it (engines.comfyui.dir), the leader adds a picture preset that fits (presets.auto).
    Part("media", "Pictures and 3D",
         "ComfyUI on the nodes for pictures and meshes",
         "no pictures or 3D until a node names its ComfyUI in engines.comfyui.dir", built=False,
         missing="installed by hand",
         docs="docs/media.md#presets"),
    Part("judge", "Guardrails' judge",
         "a small model that reads prompts and answers for harm",
         "the baseline policy still refuses secrets and masks card numbers, without a judge",
         settings="Qwen3Guard-Gen 0.6B on this machine's CPUs, or a simulated judge that needs no internet; and "
                  "how many copies (one on a single machine, on up to four cores; two on two cores each with three "
                  "machines). Each keeps 2 GB and runs without a prompt cache. The baseline policy asks it about "
                  "every prompt and answer, and refuses what it could not read in time (fail: closed)."),
    Part("firewall", "Firewall",
         "nftables: the client port open, the rest to the cluster",
         "the agent, metrics and engine ports are open to anyone who reaches this machine",
         settings="Rules written with nftables; the rule that keeps your SSH connection is written first."),
    Part("notify", "Notifications",
         "a webhook told when something goes wrong",
         "nobody is told until a webhook is added (llmgw ctl webhooks add)",
         settings="Where the cluster's events go (a budget spent, a node lost, a replica failed, a leader "
                  "changed, a guardrail's block): a webhook's address, sent each event as JSON, or as a "
                  "message for Slack, Mattermost or Rocket.Chat. docs/webhooks.md lists the events."),
    Part("limits", "Limits and keys",
         "the longest an API key lives", "", always=True,
         settings="The longest lifetime of a new API key (e.g. 90d); empty is no limit."),
    Part("turns", "Taking turns on a card",
         "on-demand models load when asked, give the card back unused", "", always=True,
         settings="Set per model, not here: a model's on_demand.evict_after_idle (2 minutes unless set) says how "
                  "long it goes unused before another may have its card (docs/models.md)."),
    Part("bundle", "Offline bundle",
         "installs from one file with no registry reachable", "the install needs nothing offline here",
         settings="A bundle made with `python3 build.py dist --bundle`: the program, and llama.cpp's engine for "
                  "nodes that reach no package registry. Give its path, and its sha256 as whoever made it published "
                  "it: the files inside are checked against the bundle's own list, and the whole file against "
                  "the sha256 you give, before anything is installed."),
)

PART = {p.key: p for p in PARTS}


STARTER = {s.key: s for s in STARTERS}
HF_GGUF = re.compile(r"^hf:[A-Za-z0-9][\w.-]*/[\w.-]+/[\w./-]+\.gguf(@[\w.-]+)?$", re.IGNORECASE)


class ChoiceError(ExpectedError):
    """A choice that cannot be installed, said in one sentence; `part` names the setting to open."""

    def __init__(self, part: str, sentence: str):
        super().__init__(sentence)
        self.part = part


@dataclass
class Machine:
    """One of the other two machines of three. The passwords live here, in memory, for the run only."""

    address: str = ""
    user: str = "root"
    auth: str = "key"  # "key" | "agent" | "password"
    key_path: str = ""
    password: str = field(default="", repr=False)
    sudo_password: str = field(default="", repr=False)

    def label(self) -> str:
        return f"{self.user}@{self.address}" if self.address else "(not set)"


@dataclass
class Choices:
    """What the person (or the command line) chose. The defaults are the reference's."""

    machines: int = 1
    others: list[Machine] = field(default_factory=lambda: [Machine(), Machine()])
    # What was turned on or off; a part not named here is as default_on() says.
    on: dict[str, bool] = field(default_factory=lambda: {"all_three": True, "node": True, "starter": True})
    admin_email: str = "admin@localhost"
    language: str = "en"
    starter: str = "qwen2.5-0.5b"
    starter_context: int = 4096
    max_key_ttl: str = ""
    vip: str = ""
    listen: dict[str, str] = field(default_factory=lambda: dict(LISTEN_DEFAULTS))
    root: str = "/"
    services: str | None = None
    mirror_dir: str = MIRROR_DIR
    mirror_listen: str = MIRROR_LISTEN
    webhook: str = ""
    webhook_format: str = "json"  # or "slack"
    webhook_private: bool = False  # a loopback or link-local address, meant (refused otherwise: docs/webhooks.md)
    bundle: str = ""  # an offline bundle's path (`python3 build.py dist --bundle`)
    bundle_sha256: str = ""  # the whole file's, as its maker published it
    judge: str = ""  # a key of onboard.judge.JUDGES; empty: simulated with a simulated starter, else Qwen3Guard
    judge_replicas: int = 0  # 0: one on a single machine, two with three, one on each judge machine (onboard.judge)
    # Machines for the judges alone (USER@HOST[:PORT]), added as nodes labelled llmgw.role=judge (the original's
    # J3: on a control plane that was also a node, 38 of 60 requests went unjudged under load; on a node of
    # their own, 2).
    judge_nodes: list[str] = field(default_factory=list)
    # This machine's memory and CPUs as the judge's room is judged; 0: read them (a test gives a small machine).
    machine_memory: int = 0
    machine_cpus: int = 0

    def is_on(self, key: str) -> bool:
        part = PART[key]
        if not part.built or not self.applies(part):
            return False
        if key == "judge" and self.on.get(key, self.default_on(key)) and self.judge_room() is not None:
            return False
        return part.always or self.on.get(key, self.default_on(key))

    def default_on(self, key: str) -> bool:
        """Whether a part nobody turned on or off is installed. The firewall is, on the machine itself only: an
        install into a directory cannot write the machine's rules, and with the firewall on by default there it
        was refused until the person found the part to turn off."""
        if key == "judge":
            # On machines of its own, or on this machine's node: with neither, the judge would wait for a node
            # that joins later.
            return bool(self.judge_nodes) or self.is_on("node")
        return key == "firewall" and self.root == "/"

    def judge_key(self) -> str:
        """The judge to install: the one chosen, else simulated beside a simulated starter (an install with no
        internet, as a test or a trial is), else Qwen3Guard."""
        from llmgw.onboard.judge import DEFAULT_JUDGE

        if self.judge:
            return self.judge
        return "sim" if self.is_on("starter") and self.starter_source()[2] == "sim" else DEFAULT_JUDGE

    def judge_copies(self) -> int:
        return self.judge_replicas or len(self.judge_nodes) or (2 if self.machines == 3 else 1)

    def cpus(self) -> int:
        import os

        return self.machine_cpus or os.cpu_count() or 1

    def judge_room(self) -> str | None:
        """Why the judge does not fit beside the rest on this machine, or None. Only a single machine is judged
        here: with three, the judges go where the cluster has room, and the install waits for it; on machines
        of their own, those are judged once they have joined (FirstPlane.step_judge)."""
        from llmgw.onboard.judge import JUDGE, why_no_room

        if self.machines != 1 or self.judge_nodes or JUDGE.get(self.judge_key(), JUDGE["sim"]).engine == "sim":
            return None
        memory = self.machine_memory
        if not memory:
            import psutil

            memory = psutil.virtual_memory().total
        starter = 0
        if self.on.get("starter", True) and self.starter_source()[2] != "sim":
            starter = 4 * 1024 ** 3  # what `ctl model serve` keeps until the weights' size is known
        return why_no_room(self.cpus(), memory, starter, self.judge_copies())

    def applies(self, part: Part) -> bool:
        if part.three_machines_only and self.machines != 3:
            return False
        return not (part.one_machine_only and self.machines != 1)

    def toggle(self, key: str) -> str:
        """Turn a part on or off; a sentence when it cannot be."""
        part = PART[key]
        if not part.built:
            if part.missing != "not built yet":
                return f"{part.name} is {part.missing}: add it once the cluster runs ({part.docs})."
            return f"{part.name} is not built yet in this version (docs/not-yet-built.md)."
        if part.always:
            return f"{part.name} is always part of an install."
        if not self.applies(part):
            return f"{part.name} is for three machines."
        turning_on = not self.is_on(key)
        self.on[key] = turning_on
        if key == "judge" and turning_on and self.judge_room():
            return f"The guardrails' judge does not fit here: {self.judge_room()}."
        return ""

    def starter_source(self) -> tuple[str, str, str]:
        """(the name clients ask for, its source, its engine)."""
        known = STARTER.get(self.starter)
        if known is not None:
            return (known.key, known.source, known.engine)
        last = self.starter.split("@", 1)[0].rsplit("/", 1)[-1]
        name = re.sub(r"[^a-z0-9._-]+", "-", last.lower().removesuffix(".gguf")).strip("-.") or "starter"
        return (name, self.starter, "llamacpp")

    def check(self) -> None:
        """Raise ChoiceError for what cannot go together, naming the part whose setting is wrong."""
        if "@" not in self.admin_email or self.admin_email.startswith("@"):
            raise ChoiceError("control", f'"{self.admin_email}" is not an e-mail address; '
                                         "give the first administrator's, such as admin@example.com.")
        if self.language not in ("en", "tr"):
            raise ChoiceError("control", f'the portal has no language "{self.language}"; choose en or tr.')
        if self.is_on("starter"):
            if self.starter not in STARTER and not HF_GGUF.match(self.starter):
                raise ChoiceError("starter", f'"{self.starter}" is not a starter model; choose one of the list '
                                             "or give a GGUF on Hugging Face as hf:OWNER/REPO/FILE.gguf.")
            if not 512 <= self.starter_context <= 1_048_576:
                raise ChoiceError("starter", f"a context of {self.starter_context} tokens is out of range; "
                                             "give 512 to 1048576.")
            if not self.is_on("node") and self.machines == 1:
                raise ChoiceError("starter", "a starter model needs a node to run on; turn on "
                                             "\"This machine as a node\" or turn the starter model off.")
        if self.is_on("judge"):
            self._check_judge()
        if self.is_on("firewall") and self.root != "/":
            raise ChoiceError("firewall", f"an install under {self.root} cannot write this machine's firewall "
                                          "(its rules are the machine's own); turn the firewall off.")
        if self.is_on("mirror"):
            self._check_mirror()
        if self.is_on("notify"):
            self._check_webhook()
        if self.is_on("bundle"):
            self._check_bundle()
        if self.max_key_ttl and not re.fullmatch(r"\d+(s|m|h|d)", self.max_key_ttl):
            raise ChoiceError("limits", f'"{self.max_key_ttl}" is not a lifetime; write it as 90d, 12h or 30m, '
                                        "or leave it empty for no limit.")
        if self.machines == 3 and self.vip:
            from llmgw.onboard.keepalived import FloatingAddressError, parse_vip

            try:
                parse_vip(self.vip)
            except FloatingAddressError as e:
                raise ChoiceError("all_three", f"{e}.") from None
        if self.machines == 3:
            for i, m in enumerate(self.others, start=2):
                if not m.address:
                    raise ChoiceError("machines", f"machine {i} has no address; give its host name or IP.")
                if m.auth == "password" and not m.password:
                    raise ChoiceError("machines", f"machine {i} ({m.label()}) is to be reached with a password; "
                                                  "give it, or choose its SSH key or the SSH agent.")
                if m.auth == "key" and not m.key_path:
                    raise ChoiceError("machines", f"machine {i} ({m.label()}) is to be reached with an SSH key; "
                                                  "give the key's path, or choose the SSH agent.")
            self._check_judge_machines()

    def _check_judge_machines(self) -> None:
        """The judges' machines as the screens take them: USER@HOST[:PORT] each, none of them one of the three."""
        from llmgw.onboard.ssh import Target
        from llmgw.onboard.steps import StepFailed

        if self.judge_nodes and not self.is_on("judge"):
            raise ChoiceError("machines", "machines are given for the judges, but the guardrails' judge is off; "
                                          "turn it on among the parts, or leave the judges' machines empty.")
        # Host and port: three machines and a judge's on one host, each its own sshd, are a test or a trial.
        three = set()
        for m in self.others:
            try:
                other = Target.parse(f"{m.user or 'root'}@{m.address}")
            except StepFailed:
                continue  # machine N's own address is refused above
            three.add((other.host, other.port))
        for i, given in enumerate(self.judge_nodes, start=1):
            try:
                target = Target.parse(given)
            except StepFailed:
                raise ChoiceError("machines", f'the judges\' machine {i}, "{given}", is not USER@HOST[:PORT]; '
                                              "write it as root@10.0.0.9, or leave it empty.") from None
            if (target.host, target.port) in three:
                raise ChoiceError("machines", f"the judges' machine {i} ({given}) is one of the three; a judge's "
                                              "machine is one of its own, or leave it empty.")

    def _check_judge(self) -> None:
        from llmgw.onboard.judge import JUDGE

        if self.judge and self.judge not in JUDGE:
            raise ChoiceError("judge", f'"{self.judge}" is not a judge setup installs; choose {" or ".join(JUDGE)}.')
        if not 1 <= self.judge_copies() <= 8:
            raise ChoiceError("judge", f"{self.judge_replicas} copies of the judge is out of range; give 1 to 8.")
        if not self.is_on("node") and self.machines == 1:
            raise ChoiceError("judge", "the judge needs a node to run on; turn on \"This machine as a node\" or "
                                       "leave the judge out.")
        if self.judge_nodes and self.machines != 3:
            raise ChoiceError("judge", "machines of the judges' own are for three machines; on one, add one once "
                                       "the cluster runs: llmgw node add --ssh USER@HOST --label llmgw.role=judge.")

    def _check_bundle(self) -> None:
        """The bundle's file is there and is the one its maker published (the sha256 given of the whole file):
        the sums inside a bundle would be rewritten with a file that was changed."""
        import os

        from llmgw.release import sha256_of

        if not self.bundle.startswith("/") or not os.path.isfile(self.bundle):
            raise ChoiceError("bundle", f'there is no bundle at "{self.bundle}"; give the full path of the '
                                        "llmgw-VERSION-bundle.tar file carried in.")
        wanted = self.bundle_sha256.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{64}", wanted):
            raise ChoiceError("bundle", "give the bundle's sha256 as its maker published it (64 hexadecimal "
                                        "digits, as sha256sum prints it), so a changed file is refused.")
        try:
            found = sha256_of(self.bundle)
        except OSError as e:
            raise ChoiceError("bundle", f"{self.bundle} cannot be read: {e.strerror}.") from None
        if found != wanted:
            raise ChoiceError("bundle", f"{self.bundle} is not the bundle whose sha256 you gave: its own is "
                                        f"{found}. Copy it again, or check the sha256 with whoever made it.")

    def _check_webhook(self) -> None:
        from llmgw.notify import NotifyError, check_url

        if not self.webhook:
            raise ChoiceError("notify", "give the webhook's address (https://…), or turn notifications off.")
        if self.webhook_format not in ("json", "slack"):
            raise ChoiceError("notify", f'a webhook is sent json or slack, not "{self.webhook_format}".')
        try:
            check_url(self.webhook, self.webhook_private)
        except NotifyError as e:
            why = e.params.get("why")
            raise ChoiceError("notify", f"{why}; if the webhook is meant to be there, say so (the box below, or "
                                        "--webhook-allow-private)." if why else f"{e}.") from None

    def _check_mirror(self) -> None:
        from llmgw.config import Address

        if not self.mirror_dir.startswith("/"):
            raise ChoiceError("mirror", f"the mirror's folder \"{self.mirror_dir}\" is not a full path; give one "
                                        "such as /var/cache/llmgw/mirror or /data/mirror.")
        try:
            listen = Address(self.mirror_listen)
        except ValueError:
            listen = None
        if listen is None or listen.port == 0:
            raise ChoiceError("mirror", f"the mirror's address \"{self.mirror_listen}\" is not one to listen on; "
                                        "write it as :8600 or 10.0.0.5:8600.")
        for role, written in self.listen.items():
            try:
                taken = Address(written).port
            except ValueError:
                continue
            if taken == listen.port:
                raise ChoiceError("mirror", f"the mirror's port {listen.port} is the {role} port too; give the "
                                            "mirror another.")


@dataclass(frozen=True)
class PlanLine:
    part: str
    installed: bool
    sentence: str


def plan(choices: Choices) -> list[PlanLine]:
    """Part by part: what is installed, or what is left out and what that costs."""
    lines = []
    for part in PARTS:
        if not choices.applies(part):
            continue
        if not part.built:
            lines.append(PlanLine(part.key, False, f"{part.name}: {part.missing}; {part.without}."))
        elif choices.is_on(part.key):
            lines.append(PlanLine(part.key, True, f"{part.name}: {_installs(choices, part.key)}"))
        elif part.key == "judge" and choices.on.get("judge", choices.default_on("judge")) and choices.judge_room():
            lines.append(PlanLine(part.key, False, f"{part.name}: left out: {choices.judge_room()}; add one on a "
                                                   f"larger node later (docs/guardrails.md); {part.without}."))
        else:
            lines.append(PlanLine(part.key, False, f"{part.name}: left out; {part.without}."))
    return lines


def _installs(choices: Choices, key: str) -> str:
    if key == "control":
        where = "on this machine" if choices.machines == 1 else "led from this machine"
        return f"{where}; first administrator {choices.admin_email}, portal in {choices.language}."
    if key == "store":
        return ("SQLite on this machine." if choices.machines == 1
                else "PostgreSQL under Patroni on the three machines.")
    if key == "all_three":
        return f"standbys on the other two{f', floating address {choices.vip}' if choices.vip else ''}."
    if key == "node":
        return "this machine's agent joins and runs the engines."
    if key == "starter":
        name, source, engine = choices.starter_source()
        if engine == "sim":
            return f"{name}, a simulated model that answers at a set speed (no weights, no internet)."
        return f"{name} from {source}, context {choices.starter_context} tokens."
    if key == "mirror":
        where = "on this machine" if choices.machines == 1 else "on this machine and the second, each the other's peer"
        return f"{where}, files in {choices.mirror_dir}; nodes fetch weights from it only."
    if key == "firewall":
        return "nftables rules; the client port open to all, the cluster's ports to its networks."
    if key == "judge":
        from llmgw.onboard.judge import JUDGE, judge_cores, judge_name

        model, copies = JUDGE[choices.judge_key()], choices.judge_copies()
        if model.engine == "sim":
            return (f"{judge_name(model.key)}, a simulated judge (no weights, no internet), asked by the baseline "
                    "policy.")
        if choices.judge_nodes:
            return (f"{model.key} from {model.source}: {copies} cop{'y' if copies == 1 else 'ies'} on "
                    f"{' and '.join(choices.judge_nodes)}, machines of their own (llmgw.role=judge), each keeping "
                    "up to 4 cores and 2 GB, asked by the baseline policy; its speed is measured once it is up.")
        cores = judge_cores(choices.cpus(), copies)
        return (f"{model.key} from {model.source}: {copies} cop{'y' if copies == 1 else 'ies'}, each keeping "
                f"{cores} core{'s' if cores > 1 else ''} and 2 GB, asked by the baseline policy; its speed is "
                "measured once it is up.")
    if key == "notify":
        shape = "Slack messages" if choices.webhook_format == "slack" else "JSON"
        return f"every event sent to {choices.webhook} as {shape}."
    if key == "bundle":
        return (f"the program and the engine wheels from {choices.bundle} (sha256 {choices.bundle_sha256[:12]}…), "
                "every file checked; nodes take llama.cpp from it, asking no registry.")
    if key == "turns":
        return "on-demand models give their card back after 2 minutes unused, unless a model says otherwise."
    if key == "limits":
        return (f"API keys live at most {choices.max_key_ttl}." if choices.max_key_ttl
                else "API keys live until revoked.")
    return PART[key].what + "."


def command(choices: Choices) -> str:
    """The one command that does the same install from a script."""
    argv = ["llmgw", "server", "init", "--install"]
    if choices.admin_email != "admin@localhost":
        argv += ["--admin-email", choices.admin_email]
    if choices.language != "en":
        argv += ["--language", choices.language]
    if not choices.is_on("node"):
        argv.append("--no-node")
    if not choices.is_on("starter"):
        argv.append("--no-model")
    else:
        argv += ["--starter", choices.starter]
        if choices.starter_context != 4096 and choices.starter_source()[2] != "sim":
            argv += ["--starter-context", str(choices.starter_context)]
    if not choices.is_on("judge"):
        argv.append("--no-judge")
    else:
        if choices.judge:
            argv += ["--judge", choices.judge]
        if choices.judge_replicas:
            argv += ["--judge-replicas", str(choices.judge_replicas)]
        for machine in choices.judge_nodes:
            argv += ["--judge-node", machine]
    if choices.is_on("mirror"):
        argv.append("--mirror")
        if choices.mirror_dir != MIRROR_DIR:
            argv += ["--mirror-dir", choices.mirror_dir]
        if choices.mirror_listen != MIRROR_LISTEN:
            argv += ["--mirror-listen", choices.mirror_listen]
    if not choices.is_on("firewall"):
        argv.append("--no-firewall")
    if choices.is_on("notify"):
        argv += ["--webhook", choices.webhook]
        if choices.webhook_format != "json":
            argv += ["--webhook-format", choices.webhook_format]
        if choices.webhook_private:
            argv.append("--webhook-allow-private")
    if choices.is_on("bundle"):
        argv += ["--bundle", choices.bundle, "--bundle-sha256", choices.bundle_sha256]
    if choices.max_key_ttl:
        argv += ["--max-key-ttl", choices.max_key_ttl]
    for role, default in LISTEN_DEFAULTS.items():
        if choices.listen.get(role, default) != default:
            argv += [f"--listen-{role}", choices.listen[role]]
    if choices.root != "/":
        argv += ["--root", choices.root]
    if choices.machines == 3:
        # One login for the other two from a script (the screens may take one each).
        argv += ["--ha", ",".join(m.label() for m in choices.others)]
        first = choices.others[0]
        if first.auth == "key" and first.key_path:
            argv += ["--key", first.key_path]
        elif first.auth == "password":
            argv.append("--password")
        if any(m.sudo_password for m in choices.others) and first.auth != "password":
            argv.append("--sudo-password")
        if choices.vip:
            argv += ["--vip", choices.vip]
    if choices.services:
        argv += ["--services", choices.services]
    return shlex.join(argv)
