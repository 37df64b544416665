"""The guardrails' judge that setup places: which model, how many copies, and what each keeps of its machine.

The figures are the Go original's, measured on its installs (its J2, J5, J8):

- a judgment of about 280 tokens takes 8.0 s on one core, 4.2 s on two and
  2.3 s on four, against the 5 s a policy waits by default, so a judge
  reserves two cores, and the one judge of a single machine up to four (a
  second copy on the same machine shares its cores and is lost with it,
  buying nothing but half the speed of each);
- with llama.cpp's prompt cache one judge grew to 3.2 GB after a day: a
  judge never reads the same text twice, so it runs without one (the
  catalog's `role: judge` gives llama.cpp `--cache-ram 0`) and keeps 2 GB;
- on a machine too slow for it, the install says so before the first
  refused request (firstplane's judge step times three judgments);
- on a 4-core control plane that was also a node, 38 of 60 requests under
  load went unjudged; with the judges on a node of their own, 2 (its J3):
  machines given for them join as nodes labelled `llmgw.role=judge`,
  which the placement keeps for judges, and the judge selects that label.

A simulated judge (sim-engine answering as Qwen3Guard does, refusing a few
words) stands in where there is no internet, as the simulated starter does.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from llmgw.control import ROLE_LABEL

GB = 1024 ** 3
JUDGE_ROLE = "judge"  # the llmgw.role label of a judge's own machine


class JudgeModel(NamedTuple):
    key: str
    label: str
    source: str
    engine: str
    short: str  # what the setup screen's list says of it, in a narrow column


JUDGES: tuple[JudgeModel, ...] = (
    # Qwen publishes Qwen3Guard-Gen as safetensors only; this is a GGUF of its 0.6B at 8 bits (0.6 GB),
    # pinned and checked against Hugging Face when it is added, as every model is.
    JudgeModel("qwen3guard-0.6b", "Qwen3Guard-Gen 0.6B (0.6 GB)",
               "hf:QuantFactory/Qwen3Guard-Gen-0.6B-GGUF/Qwen3Guard-Gen-0.6B.Q8_0.gguf", "llamacpp", "qwen3guard"),
    JudgeModel("sim", "Simulated judge (no internet, no weights)", "", "sim", "simulated"),
)
JUDGE = {j.key: j for j in JUDGES}
DEFAULT_JUDGE = "qwen3guard-0.6b"
SIM_JUDGE_NAME = "judge-sim"  # the simulated judge's name in the catalog
# What the simulated judge finds unsafe, in the baseline's categories: enough to see a refusal on a trial install.
SIM_JUDGE_WORDS = ("stab=Violent", "bomb=Violent", "jailbreak=Jailbreak")
JUDGE_MEMORY = 2 * GB
JUDGE_CONTEXT = 8192  # the judge reads texts in pieces of 4,000 characters (llmgw.guard.judge), a context's worth
MOST_CORES_ONE = 4  # the one judge of a single machine: 2.3 s a judgment on four cores
CORES_EACH = 2  # each of several judges


def judge_name(key: str) -> str:
    """The name the judge is served under in the catalog (and that the baseline policy names)."""
    return SIM_JUDGE_NAME if JUDGE[key].engine == "sim" else key


def judge_cores(cpus: int, replicas: int) -> int:
    """Cores each judge keeps: the one judge of a machine up to four, several two each, one below four CPUs."""
    if replicas <= 1:
        return max(1, min(MOST_CORES_ONE, cpus))
    return CORES_EACH if cpus >= 2 * CORES_EACH else 1


def why_no_room(cpus: int, memory: int, others: int, replicas: int, machine: str = "this machine") -> str | None:
    """Why `machine` cannot also hold the judge, or None when it can.

    `others` is what the rest of the install keeps of its memory (the
    starter's); a machine keeps 1 GB for itself besides."""
    needed = replicas * JUDGE_MEMORY + others + GB
    if memory < needed:
        copies = "it" if replicas == 1 else f"each of its {replicas} copies"
        return (f"{machine} has {memory / GB:.1f} GB of memory, and the judge needs {JUDGE_MEMORY // GB} GB for "
                f"{copies} beside the rest ({needed / GB:.1f} GB in all)")
    if cpus < 1:
        return f"{machine} reports no CPUs to run the judge on"
    return None


def copies_on_each(replicas: int, own_nodes: int) -> int:
    """The copies one of the judges' own machines holds: `replicas` spread over them, rounded up."""
    return -(-replicas // own_nodes)


def judge_doc(key: str, *, cpus: int, replicas: int, own_nodes: int = 0) -> dict[str, Any]:
    """The catalog entry of the judge, as `llmgw ctl model add` takes it; with `own_nodes`, placed only on the
    nodes labelled llmgw.role=judge (which take no other model), `cpus` the fewest of theirs."""
    model = JUDGE[key]
    on_each = copies_on_each(replicas, own_nodes) if own_nodes else replicas
    profile: dict[str, Any] = {"engine": model.engine, "cpu_cores": judge_cores(cpus, on_each),
                               "memory": f"{JUDGE_MEMORY // GB}GB"}
    if own_nodes:
        profile["node_selector"] = {ROLE_LABEL: JUDGE_ROLE}
    if model.engine == "sim":
        profile["memory"], profile["cpu_cores"] = "64MB", 0  # answers at a set speed: it needs no cores
        profile["args"] = [arg for word in SIM_JUDGE_WORDS for arg in ("--guard", word)]
    doc: dict[str, Any] = {"name": judge_name(key), "role": "judge", "profiles": [profile],
                           "scaling": {"min": replicas}}
    if model.source:
        doc["source"] = model.source
        doc["context_length"] = JUDGE_CONTEXT
    return doc
