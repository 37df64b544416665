"""The administrator's changes to a served model, each a pure function from a spec to the new one.

`scale`, `resources`, `context` and `gpus` take the model's spec and what
the cluster has (nodes and replicas, for the checks that need them) and
return the new spec and notes to tell the person; a change that cannot
work is refused with `Refusal`, a sentence with the figures — a context
the memory cannot hold says how long one can be. The placement pass then
replaces the model's replicas one by one, because the profile hash moved.
`serve_spec` makes a spec from a source for `llmgw ctl model serve`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from llmgw.config import Size
from llmgw.control.catalog.cluster import NodeView
from llmgw.control.catalog.fit import Need, Room, gb, static_refusal
from llmgw.control.catalog.spec import GB, MB, SELF_SIZING, GPUNeed, ModelSpec, Profile, SpecError, load_spec
from llmgw.errors import N_, ExpectedError
from llmgw.store import Replica

# Engines that spread one replica over several cards by tensor parallel,
# and those that run on one card only.
TENSOR_PARALLEL = ("vllm", "sglang", "trtllm")
ONE_CARD = ("comfyui", "strata")
# What a replica is given when `serve` cannot tell the weights' size.
SERVE_MEMORY = 4 * GB


class Refusal(ExpectedError):
    """A change refused, as the sentence to show; `status` is the HTTP status that fits it.

    Raised with an N_() template and its params, so the portal says it in the reader's language.
    """

    def __init__(self, message: str, status: int = 400, code: str = "refused", *,
                 params: Mapping[str, object] | None = None):
        super().__init__(message, params=params)
        self.status, self.code = status, code


def _reload(spec: ModelSpec) -> ModelSpec:
    """The spec through the loader again, so a change is held to every rule a model file is."""
    try:
        return load_spec(spec.to_doc())
    except SpecError as e:
        raise Refusal(e.template, params=e.params or None) from None


def _profiles(spec: ModelSpec, profile: str | None, want_gpus: bool = False) -> list[int]:
    """The profile indexes a change applies to: the one named (by index or engine), else all
    (with `want_gpus`, all on cards)."""
    if profile is None:
        found = [i for i, p in enumerate(spec.profiles) if p.gpus or not want_gpus]
        if not found:
            raise Refusal(N_('{name} runs on CPUs only: none of its profiles has gpus; add one to its model file '
                             '(llmgw ctl model add -f FILE after ctl model remove)'), params={"name": spec.name})
        return found
    if profile.isdigit() and int(profile) < len(spec.profiles):
        return [int(profile)]
    named = [i for i, p in enumerate(spec.profiles) if p.engine == profile]
    if not named:
        engines = ", ".join(f"{i} ({p.engine})" for i, p in enumerate(spec.profiles))
        raise Refusal(N_('{name} has no profile {profile}; its profiles are {engines}'),
                      params={"name": spec.name, "profile": profile, "engines": engines})
    return named


def _eligible(spec: ModelSpec, index: int, nodes: Sequence[NodeView], ignore_cards: bool = False) -> list[NodeView]:
    need = Need.of(spec, index)
    if ignore_cards:
        need = dataclasses.replace(need, gpu_count=0)
    return [n for n in nodes if static_refusal(n, need) is None]


def check_engines(spec: ModelSpec) -> None:
    """Each profile as its engine's adapter would take it on a node, refused here the same way.

    The adapter refuses flags and variables that load code or move where an
    engine reads or writes; said when the model is added, not when a node
    first tries to start it. Cards are numbered 0..count-1 for the check:
    which ones a replica gets is the placement's choice.
    """
    from llmgw import engines

    for i, p in enumerate(spec.profiles):
        try:
            adapter = engines.engine(p.engine)
        except engines.UnknownEngine:
            continue  # the spec's own check names the engines; a site's own may be on the nodes only
        count = p.gpus.count if p.gpus else 0
        try:
            adapter.validate(spec.engine_profile(i, list(range(count))))
        except engines.ProfileError as e:
            raise Refusal(N_('profiles[{i}].{field}: {reason}'),
                          code="invalid_model", params={"i": i, "field": e.field, "reason": e.reason}) from None


# --- scale and resources -----------------------------------------------------------------------

def scale(spec: ModelSpec, min_: int | None, max_: int | None) -> tuple[ModelSpec, list[str]]:
    if min_ is None and max_ is None:
        raise Refusal(N_("say --min, --max or both"), code="invalid_request")
    sc = spec.scaling
    lo = sc.min if min_ is None else min_
    hi = (sc.max if max_ is None else max_)
    if min_ is not None and max_ is None and sc.max and sc.max < lo:
        hi = lo  # raising min past the old max raises max with it
    if lo < 0 or hi < 0:
        raise Refusal(N_("--min and --max are 0 or more"), code="invalid_request")
    if hi and hi < lo:
        raise Refusal(N_("--max {hi} is fewer than --min {lo}"), code="invalid_request", params={"hi": hi, "lo": lo})
    notes: list[str] = []
    if spec.stopped:
        notes.append(f"{spec.name} was stopped; it starts again at this number")
    new = dataclasses.replace(spec, scaling=dataclasses.replace(sc, min=lo, max=hi), stopped=False)
    return _reload(new), notes


def resources(spec: ModelSpec, cores: int | None, memory: str | None, profile: str | None,
              nodes: Sequence[NodeView]) -> tuple[ModelSpec, list[str]]:
    if cores is None and memory is None:
        raise Refusal(N_("say --cores, --memory or both"), code="invalid_request")
    if cores is not None and cores < 0:
        raise Refusal(N_("--cores is 0 or more, got {cores}"), code="invalid_request", params={"cores": cores})
    size = None
    if memory is not None:
        try:
            size = Size.parse(memory)
        except ValueError as e:
            raise Refusal(N_("--memory: {e}"), code="invalid_request", params={"e": e}) from None
        if 0 < int(size) < 16 * MB:
            raise Refusal(N_('--memory: {memory} is {size} bytes; write a size like 4GB'),
                          code="invalid_request", params={"memory": memory, "size": int(size)})
    profiles = list(spec.profiles)
    notes: list[str] = []
    for i in _profiles(spec, profile):
        p = profiles[i]
        # A memory given by a person is theirs: no longer a guess to replace with the weights' length.
        p = dataclasses.replace(p, cpu_cores=p.cpu_cores if cores is None else cores,
                                memory=p.memory if size is None else size,
                                size_from_weights=p.size_from_weights and size is None)
        profiles[i] = p
    new = _reload(dataclasses.replace(spec, profiles=profiles))
    if nodes:
        _check_hosts(new, nodes, "these resources")
    return new, notes


def _check_hosts(spec: ModelSpec, nodes: Sequence[NodeView], what: str) -> None:
    """Refuse when no profile's memory and cores fit any node it may run on, even an empty one."""
    said = []
    for i, p in enumerate(spec.profiles):
        eligible = _eligible(spec, i, nodes)
        if not eligible:
            continue
        need = Need.of(spec, i)
        biggest = max(eligible, key=lambda n: (n.memory_mb, n.cores))
        if any(need.memory_mb <= n.memory_mb and need.cores <= n.cores for n in eligible):
            return
        most_cores = max(n.cores for n in eligible)
        if need.memory_mb > biggest.memory_mb:
            said.append(f"profile {i} ({p.engine}) needs {gb(need.memory_mb)} and the largest node it may run "
                        f"on ({biggest.name}) has {gb(biggest.memory_mb)}")
        else:
            said.append(f"profile {i} ({p.engine}) needs {need.cores} cores and the most on a node it may run "
                        f"on is {most_cores}")
    if said:
        raise Refusal(N_("{what} fit no node: {reasons}"), params={"what": what, "reasons": "; ".join(said)})


# --- context -----------------------------------------------------------------------------------

def context(spec: ModelSpec, tokens: int | None, slots: int | None, max_output: int | None,
            nodes: Sequence[NodeView]) -> tuple[ModelSpec, list[str]]:
    """A new context (tokens a request), slots and longest answer, with the memory its KV cache takes."""
    if tokens is None and slots is None and max_output is None:
        raise Refusal(N_("say the context in tokens, --slots or --max-output"), code="invalid_request")
    notes: list[str] = []
    for name, value in (("the context", tokens), ("--slots", slots), ("--max-output", max_output)):
        if value is not None and value < (0 if name == "--max-output" else 1):
            raise Refusal(N_("{flag} must be {least} or more, got {got}"),
                          code="invalid_request",
                          params={"flag": name, "least": 0 if name == "--max-output" else 1, "got": value})
    old_ctx, old_slots = spec.context_length, spec.slots
    new_ctx = old_ctx if tokens is None else tokens
    new_slots = old_slots if slots is None else slots
    if spec.trained_context and new_ctx > spec.trained_context:
        raise Refusal(N_('a {new_ctx}-token context is longer than {name} was trained for ({trained_context} tokens)'),
                      params={"new_ctx": new_ctx, "name": spec.name, "trained_context": spec.trained_context})
    # The longest answer: given, it is set; left out, it follows the context
    # when it did before (0, or equal to it), and never exceeds it.
    out = spec.max_output
    if max_output is not None:
        out = max_output
    elif tokens is not None and out and out == old_ctx:
        out = new_ctx
    if new_ctx and out > new_ctx:
        if max_output is not None:
            raise Refusal(N_('--max-output {out} is more than the context ({new_ctx} tokens); an answer must fit in '
                             'it'), params={"out": out, "new_ctx": new_ctx})
        notes.append(f"the longest answer was {out} tokens, more than the new context: now {new_ctx}")
        out = new_ctx
    profiles = list(spec.profiles)
    if (new_ctx, new_slots) != (old_ctx, old_slots):
        profiles = _resize_kv(spec, new_ctx, new_slots, nodes, notes)
    new = _reload(dataclasses.replace(spec, context_length=new_ctx, slots=new_slots, max_output=out,
                                      profiles=profiles))
    if (new_ctx, new_slots) == (old_ctx, old_slots):
        notes.append("only the longest answer changed: in force at once, no replica restarts")
    return new, notes


def _kv_mb(spec: ModelSpec, ctx: int, slots: int) -> float:
    return spec.kv_bytes_per_token * ctx * max(slots, 1) / MB


def _resize_kv(spec: ModelSpec, new_ctx: int, new_slots: int, nodes: Sequence[NodeView],
               notes: list[str]) -> list[Profile]:
    kv = spec.kv_bytes_per_token
    if not kv:
        notes.append("the memory kept is unchanged: the model does not say what a token of context takes "
                     "(kv_bytes_per_token); set it, or the memory with llmgw ctl model resources")
        return list(spec.profiles)
    if not spec.context_length:
        notes.append("the memory kept is unchanged: the model had no context_length to count the change from")
        return list(spec.profiles)
    old_kv = _kv_mb(spec, spec.context_length, spec.slots)
    new_kv = _kv_mb(spec, new_ctx, new_slots)
    delta = new_kv - old_kv
    profiles, refusals = [], []
    for i, p in enumerate(spec.profiles):
        if p.engine in SELF_SIZING:
            profiles.append(p)  # sizes its cache to the card itself
            continue
        if p.gpus and int(p.gpus.memory):
            per_card = int(p.gpus.memory) / MB + delta / p.gpus.count
            room, where = _largest_card(spec, i, nodes)
            if room is not None and per_card > room:
                refusals.append(_too_long(spec, i, new_ctx, new_slots, new_kv, per_card, room, where, p.gpus.count))
            profiles.append(dataclasses.replace(p, gpus=dataclasses.replace(
                p.gpus, memory=Size(max(0, math.ceil(per_card)) * MB))))
        elif p.gpus:
            profiles.append(p)  # whole cards: the engine takes what the card has
        else:
            memory = int(p.memory) / MB + delta
            eligible = _eligible(spec, i, nodes)
            biggest = max(eligible, key=lambda n: n.memory_mb) if eligible else None
            if biggest is not None and memory > biggest.memory_mb:
                refusals.append(_too_long(spec, i, new_ctx, new_slots, new_kv, memory, biggest.memory_mb,
                                          biggest.name, 0))
            profiles.append(dataclasses.replace(p, memory=Size(max(0, math.ceil(memory)) * MB)))
    if refusals and len(refusals) == sum(1 for p in spec.profiles if p.engine not in SELF_SIZING):
        # Built by _too_long from figures, in English for now.
        raise Refusal(N_("{reason}"), params={"reason": refusals[0]})
    notes += [f"{r}; that profile will not be placed" for r in refusals]
    notes.append(f"KV cache: {gb(old_kv)} → {gb(new_kv)} ({max(new_slots, 1)} × {new_ctx} tokens × "
                 f"{spec.kv_bytes_per_token} bytes)")
    return profiles


def _largest_card(spec: ModelSpec, index: int, nodes: Sequence[NodeView]) -> tuple[float | None, str]:
    """The most memory one card of a node the profile may run on has, free of other programs."""
    need = Need.of(spec, index)
    best, where = None, ""
    for n in _eligible(spec, index, nodes, ignore_cards=True):
        for g in n.gpus:
            if need.classes or need.min_cc:
                probe = dataclasses.replace(need, gpu_mb=0)
                if not probe.card_ok(g):
                    continue
            usable = g.memory_mb - g.foreign_mb
            if best is None or usable > best:
                best, where = usable, f"{n.name}'s GPU {g.index} ({g.cls})"
    return best, where


def _too_long(spec: ModelSpec, index: int, ctx: int, slots: int, kv_mb: float, need_mb: float, room_mb: float,
              where: str, cards: int) -> str:
    kv = spec.kv_bytes_per_token
    rest = need_mb - (kv_mb / cards if cards else kv_mb)
    per = (room_mb - rest) * (cards or 1) * MB / kv / max(slots, 1)
    longest = max(0, int(per) // 256 * 256)
    what = "each card" if cards else "a replica"
    fits = (f"the longest that fits is {longest} tokens" if longest else
            "not even a short context fits beside the rest")
    return (f"a {ctx}-token context ({max(slots, 1)} slot{'s' if max(slots, 1) != 1 else ''}) takes {gb(kv_mb)} "
            f"of KV cache, so {what} of profile {index} needs {gb(need_mb)}, and {where} has {gb(room_mb)}; "
            f"{fits}")


# --- cards -------------------------------------------------------------------------------------

def gpus(spec: ModelSpec, count: int, profile: str | None, in_place: bool, nodes: Sequence[NodeView],
         replicas: Sequence[Replica]) -> tuple[ModelSpec, list[str]]:
    """Each replica on `count` cards of one node, checked against what the nodes have and hold."""
    if count < 1:
        raise Refusal(N_("the count of cards is 1 or more, got {count}; serve it on CPUs with another profile"),
                      code="invalid_request", params={"count": count})
    notes: list[str] = []
    profiles = list(spec.profiles)
    indexes = _profiles(spec, profile, want_gpus=True)
    for i in indexes:
        p = profiles[i]
        old = p.gpus or GPUNeed(count=1)
        if p.engine in ONE_CARD and count > 1:
            raise Refusal(N_('{engine} runs on one card; profile {i} cannot have {count}'),
                          params={"engine": p.engine, "i": i, "count": count})
        args = list(p.args)
        if p.engine == "llamacpp":
            args = _drop_flag(args, "--tensor-split", "-ts")
            if args != p.args:
                notes.append("the --tensor-split written for the old cards was dropped")
        per_card = old.memory
        if int(old.memory):
            # The weights and cache spread over the cards: each holds its share.
            per_card = Size(math.ceil(int(old.memory) * old.count / count / MB) * MB)
        profiles[i] = dataclasses.replace(p, args=args, gpus=dataclasses.replace(old, count=count, memory=per_card))
    new = dataclasses.replace(spec, profiles=profiles)
    if in_place:
        new = dataclasses.replace(new, replace="in_place")
    new = _reload(new)
    for i in indexes:
        _check_cards(new, i, count, nodes)
    running = [r for r in replicas if r.model == spec.name and r.desired == "run"
               and r.state not in ("stopped", "failed", "parked")]
    if running and nodes:
        if in_place:
            _check_in_place(new, indexes, running, nodes, replicas)
            notes.append("each replica stops before its replacement starts on its cards; "
                         + ("the model does not answer while one loads" if len(running) == 1 else
                            "the others answer meanwhile"))
        else:
            _check_beside(new, indexes, nodes, replicas)
    return new, notes


def _drop_flag(args: list[str], *names: str) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in names:
            skip = True
            continue
        if any(a.startswith(n + "=") for n in names):
            continue
        out.append(a)
    return out


def _check_cards(spec: ModelSpec, index: int, count: int, nodes: Sequence[NodeView]) -> None:
    if not nodes:
        return
    need = Need.of(spec, index)
    best, where = 0, ""
    eligible = _eligible(spec, index, nodes, ignore_cards=True)
    for n in eligible:
        have = sum(1 for g in n.gpus if dataclasses.replace(need, gpu_mb=0).card_ok(g))
        if have > best:
            best, where = have, n.name
    kind = []
    if need.classes:
        kind.append(f" of class {' or '.join(need.classes)}")
    if need.min_cc:
        kind.append(f" of compute capability {need.min_cc:g} or later")
    if best < count:
        most = f"the most on one is {best} ({where})" if best else "none has any"
        raise Refusal(N_('no node {name} may run on has {count} GPUs{kind}: {most}'),
                      params={"name": spec.name, "count": count, "kind": ''.join(kind), "most": most})
    if need.gpu_mb:
        biggest, at = _largest_card(spec, index, nodes)
        if biggest is not None and need.gpu_mb > biggest:
            # One sentence for each number, as a translation may need more than an "s" for the plural.
            raise Refusal(N_("on {count} card each would need {need} for the weights and the context, and the "
                             "largest card ({at}) has {has}; more cards, or a shorter context first (llmgw ctl "
                             "model context)") if count == 1 else
                          N_("on {count} cards each would need {need} for the weights and the context, and the "
                             "largest card ({at}) has {has}; more cards, or a shorter context first (llmgw ctl "
                             "model context)"),
                          params={"count": count, "need": gb(need.gpu_mb), "at": at, "has": gb(biggest)})


def _rooms(nodes: Sequence[NodeView], replicas: Sequence[Replica]) -> dict[str, Room]:
    rooms = {n.id: Room(n) for n in nodes}
    for r in replicas:
        if r.node_id in rooms and r.state not in ("stopped", "failed", "parked"):
            rooms[r.node_id].hold(r)
    return rooms


def _check_beside(spec: ModelSpec, indexes: list[int], nodes: Sequence[NodeView],
                  replicas: Sequence[Replica]) -> None:
    rooms = _rooms(nodes, replicas)
    said = []
    for i in indexes:
        need = Need.of(spec, i)
        for room in rooms.values():
            if static_refusal(room.node, need) is not None:
                continue
            if room.fits(need) is not None:
                return
            said.append(f"{room.node.name}: {room.why_not(need)[0]}")
    raise Refusal(N_("{name}'s replacement on these cards fits beside its running replica on no node ({why}); "
                     '--in-place stops each replica first and starts the new one on the cards it held and the free '
                     'ones'), params={"name": spec.name, "why": '; '.join(said[:3]) or 'no node may run it'})


def _check_in_place(spec: ModelSpec, indexes: list[int], running: list[Replica], nodes: Sequence[NodeView],
                    replicas: Sequence[Replica]) -> None:
    rooms = _rooms(nodes, replicas)
    for r in running:
        room = rooms.get(r.node_id)
        if room is None:
            continue
        freed = room.without([r])
        needs = [Need.of(spec, i) for i in indexes]
        if any(static_refusal(room.node, n) is None and freed.fits(n) is not None for n in needs):
            continue
        reason = freed.why_not(needs[0])
        raise Refusal(N_("{name} does not have the cards free even with {model}'s replica {id} stopped: {why}"),
                      params={"name": room.node.name, "model": spec.name, "id": r.id,
                              "why": reason[0] if reason else 'the profile may not run there'})


# --- serve -------------------------------------------------------------------------------------

class ServeChoices(TypedDict, total=False):
    """serve_spec's choices, as the admin API and the portal hand them on (Catalog.serve)."""

    name: str | None
    engine: str | None
    gpus: int | None
    context: int | None
    slots: int | None
    memory: str | None
    cores: int | None
    sha256: str | None
    min_: int
    args: list[str]


def serve_spec(source: str, *, name: str | None = None, engine: str | None = None, gpus: int | None = None,
               context: int | None = None, slots: int | None = None, memory: str | None = None,
               cores: int | None = None, sha256: str | None = None, min_: int = 1,
               args: list[str] | None = None) -> tuple[ModelSpec, list[str]]:
    """A model spec from a source and a few choices, what `llmgw ctl model serve` adds."""
    notes: list[str] = []
    source = source.strip()
    lower = _file_part(source).lower()
    if engine is None:
        if lower.endswith(".gguf"):
            engine = "llamacpp"
        elif source in ("", "sim"):
            engine = "sim"
        elif gpus:
            engine = "vllm"
        else:
            raise Refusal(N_('say which engine serves {source} (--engine llamacpp, vllm, …): only a .gguf file is '
                             "known to be llama.cpp's"), code="invalid_request", params={"source": source})
    if engine == "sim":
        source = ""
    if name is None:
        name = _name_from(source) if source else "sim"
    unknown = False
    if memory is not None:
        try:
            size = Size.parse(memory)
        except ValueError as e:
            raise Refusal(N_("--memory: {e}"), code="invalid_request", params={"e": e}) from None
    elif gpus:
        size = Size(0)  # on cards: the host keeps nothing for the weights
    elif engine == "sim":
        size = Size(64 * MB)
    else:
        found = _local_size(source)
        if found:
            # The file, its KV cache and the engine's own: the file's size
            # and a quarter more, at least a gigabyte more.
            size = Size(math.ceil((found + max(found // 4, GB)) / MB) * MB)
            notes.append(f"memory kept: {gb(size / MB)} for a {gb(found / MB)} file; change it with "
                         f"llmgw ctl model resources {name} --memory SIZE")
        else:
            size = Size(SERVE_MEMORY)
            unknown = True
            notes.append(f"memory kept: {gb(SERVE_MEMORY / MB)}, since the weights' size is not known here, until a "
                         "node has them and says how large they are; then the file and a quarter more"
                         + (f", and a core for each 512 MB up to {cores}" if cores else "")
                         + f"; set it yourself with llmgw ctl model resources {name} --memory SIZE")
    profile: dict[str, Any] = {"engine": engine, "memory": str(size), "cpu_cores": cores or 0}
    if unknown:
        profile["size_from_weights"] = True
    if gpus:
        profile["gpus"] = {"count": gpus}
    if args:
        profile["args"] = list(args)
    doc: dict[str, Any] = {"name": name, "source": source, "profiles": [profile], "scaling": {"min": min_}}
    if sha256:
        doc["sha256"] = sha256
    if context:
        doc["context_length"] = context
    if slots:
        doc["slots"] = slots
    try:
        return load_spec(doc), notes
    except SpecError as e:
        raise Refusal(e.template, params=e.params or None) from None


def _file_part(source: str) -> str:
    """The source without a query, a fragment or an hf: revision: what names the file."""
    base = source.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    if base.startswith("hf:") and "@" in base.rsplit("/", 1)[-1]:
        base = base.rsplit("@", 1)[0]
    return base


def _name_from(source: str) -> str:
    last = _file_part(source).rsplit("/", 1)[-1].split(":", 1)[-1]
    stem = re.sub(r"\.(gguf|safetensors)$", "", last, flags=re.IGNORECASE)
    name = re.sub(r"[^A-Za-z0-9._:-]+", "-", stem).strip("-._:").lower()
    return name[:128] or "model"


def _local_size(source: str) -> int:
    path = source[len("file://"):] if source.startswith("file://") else source
    if not path.startswith("/"):
        return 0
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
