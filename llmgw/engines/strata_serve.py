"""`llmgw strata-serve`: prepare a model with Strata's own setup, then become Strata's server.

Strata serves only the families its setup knows, and its server reads what
that setup wrote (a config naming the prepared model, its draft layer and
the engine's arguments), so a replica is two steps: setup on the weights the
agent fetched, then the server. This process runs the first and then execs
the second, so the PID the supervisor started and signals is the server's.

What is assumed of Strata, from the Go original and Strata's own docs, and
not yet checked against the real engine (docs/engines.md#strata):

- setup.py takes `--yes --no-start`, where the GGUF files are
  (`--gguf-dir`), where prepared models and downloads go (`--models-dir`,
  `--data-dir`), the engine (`--prebuilt`), the card and backend, and a
  profile's `--family`, `--model` (its size) and the rest; it writes a
  `strata-*.json` config into the data directory or its own;
- serve/server.py takes `--engine strata --config FILE --host H --port P`,
  reads its key from STRATA_API_KEY, answers /health once the model is
  loaded and lists the config's `model_name` in /v1/models.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

KEY_VARIABLE = "STRATA_API_KEY"
CONFIG = "strata.json"
SETUP_LOG = "setup.log"
TAIL_LINES = 15


class StrataServeError(Exception):
    """strata-serve cannot go on; the sentence says why and what to do."""


@dataclass
class Plan:
    """What strata-serve was asked, as `llmgw strata-serve`'s flags say it."""

    host: str
    port: int
    model: str
    weights: str
    state: str
    data: str
    python: str
    strata: str
    engine: str
    setup_args: list[str] = field(default_factory=list)


def parse_listen(listen: str) -> tuple[str, int]:
    """HOST:PORT or [V6]:PORT."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT like 10.0.0.147:18090, got {listen!r}")
    return host.strip("[]"), int(port)


def home() -> Path:
    """Where relative state and data directories are: the engine user's home, as the supervisor sets $HOME.

    The supervisor gives an engine user without a home of its own (the one
    the agent makes) the shard's work directory as HOME, so there each
    replica prepares its model afresh (docs/engines.md#strata).
    """
    given = os.environ.get("HOME", "")
    return Path(given) if given and os.path.isdir(given) else Path.cwd()


def setup_argv(plan: Plan, data: Path) -> list[str]:
    """Strata's setup on the fetched weights; what strata-serve sets comes after the profile's, so it wins."""
    args: list[str] = []
    for arg in plan.setup_args:
        # A profile spells the size --size (--model names the weights everywhere else); Strata's setup calls it
        # --model.
        if arg == "--size" or arg.startswith("--size="):
            arg = "--model" + arg[len("--size"):]
        args.append(arg)
    weights = Path(plan.weights)
    gguf_dir = weights if weights.is_dir() else weights.parent
    return [plan.python, str(Path(plan.strata) / "setup.py"), "--yes", "--no-start", *args,
            "--gguf-dir", str(gguf_dir), "--models-dir", str(data / "models"), "--data-dir", str(data),
            # The engine the agent installed and checked, never one setup would fetch or build.
            "--prebuilt", plan.engine,
            # The shard's card is the only one it sees (CUDA_VISIBLE_DEVICES), so it is card 0 here.
            "--backend", "cuda", "--gpu", "0"]


def server_argv(plan: Plan, config: Path) -> list[str]:
    return [plan.python, str(Path(plan.strata) / "serve" / "server.py"), "--engine", "strata",
            "--config", str(config), "--host", plan.host, "--port", str(plan.port)]


def check_parts(plan: Plan) -> None:
    """A whole Strata: its setup, its server, an interpreter and the engine; refused by name otherwise."""
    source = Path(plan.strata)
    if not source.is_dir():
        raise StrataServeError(f"there is no Strata directory at {source}; name the directory of Strata's source "
                               "(where setup.py is) in agent.yaml (engines.strata.dir)")
    for part, what in ((source / "setup.py", "its setup"), (source / "serve" / "server.py", "its server"),
                       (Path(plan.engine) / "strata", "its engine")):
        if not part.is_file():
            raise StrataServeError(f"{source} is not a whole Strata: {what}, {part}, is missing; name a whole one "
                                   "in agent.yaml (engines.strata)")
    if not (os.path.isfile(plan.python) and os.access(plan.python, os.X_OK)):
        raise StrataServeError(f"Strata's interpreter {plan.python} is not there to run; name its environment's "
                               "python in agent.yaml (engines.strata.python)")
    if not Path(plan.weights).exists():
        raise StrataServeError(f"the model's weights are not at {plan.weights}; the agent fetches them before it "
                               "starts strata-serve")


def directories(plan: Plan) -> tuple[Path, Path]:
    """The replica's state and the node's shared data, made when missing: only the engine's user reads them."""
    base = home()
    made = []
    for given in (plan.state, plan.data):
        path = Path(given) if os.path.isabs(given) else base / given
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            raise StrataServeError(f"cannot make {path} ({e.strerror}); the engine user needs a home it can write "
                                   "in, or give --state and --data absolute paths it can") from None
        made.append(path)
    return made[0], made[1]


def run_setup(plan: Plan, state: Path, data: Path, say=print) -> list[str]:
    """Run Strata's setup, its output to our own (the agent's ring of the shard's lines) and to state/setup.log.

    Returns the last lines it wrote, for a refusal that shows them.
    """
    env = dict(os.environ)
    # Setup serves nothing and is not given the key: it lives in the server's environment alone.
    env.pop(KEY_VARIABLE, None)
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    argv = setup_argv(plan, data)
    try:
        proc = subprocess.Popen(argv, cwd=state, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
    except OSError as e:
        raise StrataServeError(f"could not run Strata's setup with {plan.python} ({e.strerror})") from None
    assert proc.stdout is not None
    with open(state / SETUP_LOG, "ab") as log:
        for raw in proc.stdout:
            log.write(raw)
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            tail.append(line)
            say(line)
    code = proc.wait()
    if code != 0:
        shown = "\n".join(f"  {line}" for line in tail) or "  (nothing)"
        raise StrataServeError(f"Strata's setup failed (exit {code}) preparing {plan.model}; the last lines it "
                               f"wrote (all of them in {state / SETUP_LOG}):\n{shown}")
    return list(tail)


def written_config(directories: list[Path], since: float) -> Path | None:
    """The strata-*.json setup wrote: the newest written since it started, in the data directory first."""
    for directory in directories:
        found = [p for p in directory.glob("strata-*.json") if p.is_file() and p.stat().st_mtime >= since]
        if found:
            return max(found, key=lambda p: p.stat().st_mtime)
    return None


def replica_config(plan: Plan, written: Path, state: Path) -> Path:
    """The replica's own copy of setup's config, with what is the agent's to say in it.

    The copy is the replica's: two replicas of a node prepared at once do
    not read each other's, and nothing written here reaches the shared one.
    """
    try:
        config = json.loads(written.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise StrataServeError(f"Strata's setup wrote {written}, which cannot be read as JSON ({e})") from None
    if not isinstance(config, dict):
        raise StrataServeError(f"Strata's setup wrote {written}, which is not a JSON object")
    # The name the catalog serves it under, which readiness waits to see in /v1/models.
    config["model_name"] = plan.model
    # The engine the agent installed and checked, whatever setup found.
    config["exe"] = str(Path(plan.engine) / "strata")
    config["log"] = str(state / "engine.log")
    config["host"], config["port"] = plan.host, plan.port
    config["open_browser"] = False
    # The key is in the environment only; one in a file every reader of the state could see is dropped.
    config.pop("api_key", None)
    path = state / CONFIG
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    return path


def prepare(plan: Plan, say=print) -> tuple[list[str], Path]:
    """Everything before the server: checks, directories, setup, the replica's config. The server's argv and cwd."""
    check_parts(plan)
    state, data = directories(plan)
    say(f"llmgw strata-serve: preparing {plan.model} with Strata's setup (the first time takes minutes: it "
        "prepares the model and fetches its draft layer)")
    started = time.time() - 1  # a file system's mtime can be a little behind the clock
    tail = run_setup(plan, state, data, say)
    written = written_config([data, Path(plan.strata), state], started)
    if written is None:
        shown = "\n".join(f"  {line}" for line in tail) or "  (nothing)"
        raise StrataServeError(f"Strata's setup finished but wrote no strata-*.json config in {data} or "
                               f"{plan.strata}; the last lines it wrote:\n{shown}")
    config = replica_config(plan, written, state)
    return server_argv(plan, config), state


def serve(plan: Plan) -> int:
    """Prepare, then become Strata's server; 1 with the reason on stderr when it cannot."""
    def say(line: str) -> None:
        print(line, flush=True)

    try:
        argv, state = prepare(plan, say)
    except StrataServeError as e:
        print(f"llmgw: strata-serve: {e}", file=sys.stderr, flush=True)
        return 1
    say(f"llmgw strata-serve: starting Strata's server for {plan.model} on {plan.host}:{plan.port}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(state)
    # The same process becomes the server: the supervisor's PID is the server's, with no llmgw left in between;
    # the key stays in the environment it was given in.
    os.execv(argv[0], argv)
    return 0  # not reached


# The names the engines' face gives them (llmgw.engines): what `llmgw strata-serve` calls.
StrataPlan = Plan
serve_strata = serve
