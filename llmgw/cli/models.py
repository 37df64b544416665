"""`llmgw ctl models | model … | restart | nodes | node show | replicas | explain-placement`: catalog and cluster.

Thin: each command reads its arguments, calls the admin API and prints a
table (or the answer whole with --json). The rules, the checks and their
sentences are the control plane's (llmgw.control.catalog), so the portal
and the console refuse the same things the same way.
"""

from __future__ import annotations

import sys
from urllib.parse import quote

from llmgw.cli.output import ago, emit_json, fields, table
from llmgw.control import AdminError

_TRUST = ("an administrator's word that a model from a publisher outside hub.trusted_publishers was checked; kept "
          "in its origin and the audit log")


def register(sub, common) -> None:
    models = sub.add_parser("models", parents=[common], help="the catalog's models, their state and replicas")
    models.set_defaults(run=run_models)

    model = sub.add_parser("model", help="add, serve, stop, start, remove, scale or resize a model")
    msub = model.add_subparsers(dest="model_command", metavar="ACTION")

    add = msub.add_parser("add", parents=[common], help="add a model from a model file (YAML or JSON)",
                          description="Adds the model a file describes (docs/models.md has the format). Refused, "
                                      "naming the key, when the file is wrong.")
    add.add_argument("-f", "--file", required=True, metavar="FILE", help="the model file")
    add.add_argument("--trust", action="store_true", help=_TRUST)
    add.set_defaults(run=run_add)

    show = msub.add_parser("show", parents=[common], help="one model: its spec and replicas")
    show.add_argument("model")
    show.set_defaults(run=run_show)

    serve = msub.add_parser(
        "serve", parents=[common], help="serve weights: a model made from a source and a few choices",
        description="Adds a model for SOURCE (a path on the nodes, https://…, hf:org/repo/file.gguf) with one "
                    "profile. A .gguf is served by llama.cpp; say --engine otherwise.")
    serve.add_argument("source")
    serve.add_argument("--engine", help="llamacpp, vllm, sglang, trtllm, comfyui, strata, freetoken or sim")
    serve.add_argument("--gpus", type=int, metavar="N", help="cards each replica runs on (default: CPUs)")
    serve.add_argument("--context", type=int, metavar="TOKENS", help="tokens one request may use")
    serve.add_argument("--slots", type=int, metavar="N", help="requests one replica serves at once")
    serve.add_argument("--name", help="the name clients ask for (default: from the file's name)")
    serve.add_argument("--memory", metavar="SIZE", help="memory kept for each replica, like 8GB")
    serve.add_argument("--cores", type=int, metavar="N", help="cores kept for each replica")
    serve.add_argument("--sha256", metavar="HEX", help="the weights' sha256, checked by every node")
    serve.add_argument("--min", type=int, default=1, metavar="N", help="replicas to run (default 1)")
    serve.add_argument("--trust", action="store_true", help=_TRUST)
    serve.add_argument("--layout", type=int, metavar="N",
                       help="the way numbered N in `llmgw ctl model plan SOURCE`: its engine, cards and memory")
    serve.set_defaults(run=run_serve)

    plan = msub.add_parser(
        "plan", parents=[common], help="the ways this cluster could run a model from Hugging Face, before fetching it",
        description="Reads the model's size and shape from the hub in hub.endpoint (a GGUF's header, a "
                    "checkpoint's config.json) and judges each way of running it on the nodes as they are now: "
                    "one card, tensor parallel or a layer split across a node's cards, the CPU with layers on a "
                    "card, the CPU alone, a pipeline across nodes. Each says what a card needs, the room left "
                    "for more context and about how many tokens a second one reply gets, or why it is not "
                    "offered. docs/models.md, \"Before fetching: the plan\".")
    plan.add_argument("source", help="hf:ORG/REPO/FILE.gguf, or hf:ORG/REPO for its safetensors")
    plan.add_argument("--context", type=int, default=0, metavar="TOKENS",
                      help="the context to plan for (default: the model's own, at most 8192)")
    plan.set_defaults(run=run_plan)

    search = msub.add_parser(
        "search", parents=[common], help="search the hub for models, each judged by what this cluster can run",
        description="Searches the hub in hub.endpoint (Hugging Face's /api/models), reads each repository's files "
                    "at their commit and judges every GGUF quantisation and safetensors checkpoint through the "
                    "plan (llmgw ctl model plan) on the nodes as they are, by its size, at 4096 tokens of context. "
                    "What cannot run here is left out and counted by why; --all lists it too.")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=20, metavar="N", help="repositories to look at (default 20)")
    search.add_argument("--all", action="store_true", help="list what cannot run here as well")
    search.set_defaults(run=run_search)

    update = msub.add_parser(
        "update", parents=[common], help="what changed on Hugging Face since a model was pinned; --apply moves it",
        description="Compares a model pinned from Hugging Face with its revision (main, say) now: the commit and the "
                    "files that differ. Nothing moves without --apply, which pins it to the new commit (in the "
                    "audit log as model.update) and replaces its replicas as the nodes fetch the new files.")
    update.add_argument("model")
    update.add_argument("--apply", action="store_true", help="move the model to the commit its revision is now")
    update.set_defaults(run=run_update)

    presets = msub.add_parser(
        "presets", parents=[common], help="llmgw's own picture models: where each stands, add one, presets.auto",
        description="Without an ACTION, lists the models that come with llmgw (FLUX.1 schnell, SDXL-Turbo on "
                    "ComfyUI), each with what "
                    "it makes, the card it needs and where it stands: in the catalog, declined (its model was "
                    "removed), fits no node, or would be added. With presets.auto on, the leader adds one, on demand, "
                    "where a node offers ComfyUI with a card it fits and the catalog makes nothing of its kind "
                    "(docs/media.md, \"Presets\").")
    psub = presets.add_subparsers(dest="presets_command", metavar="ACTION")
    padd = psub.add_parser("add", parents=[common], help="add a preset now, whatever the leader would do",
                           description="Adds the preset to the catalog (pinned to Hugging Face's commit, on demand: "
                                       "nothing is fetched until it is asked for) and takes it off presets.declined.")
    padd.add_argument("preset", metavar="NAME")
    padd.set_defaults(run=run_preset_add)
    pauto = psub.add_parser("auto", parents=[common], help="whether the leader adds presets by itself",
                            description="Sets presets.auto: on, the leader adds a preset where it fits and the "
                                        "catalog makes nothing of its kind; off, only by hand.")
    pauto.add_argument("switch", choices=("on", "off"))
    pauto.set_defaults(run=run_presets_auto)
    presets.set_defaults(run=run_presets)

    for name, text in (("stop", "stop its replicas; it stays in the catalog with its files and scaling"),
                       ("start", "run a stopped model again, scaled as it was")):
        p = msub.add_parser(name, parents=[common], help=text)
        p.add_argument("model")
        p.set_defaults(run=run_stop if name == "stop" else run_start)

    remove = msub.add_parser("remove", parents=[common], help="take a model out of the catalog",
                             description="Its replicas stop and it leaves the catalog. Its files stay on the nodes "
                                         "unless --purge, which deletes them once its replicas have stopped (what "
                                         "another model uses stays); that cannot be undone.")
    remove.add_argument("model")
    remove.add_argument("--purge", action="store_true", help="delete its files from the nodes too")
    remove.set_defaults(run=run_remove)

    scale = msub.add_parser("scale", parents=[common], help="how many replicas: --min and --max",
                            description="A stopped model scaled starts again at that number.")
    scale.add_argument("model")
    scale.add_argument("--min", type=int, metavar="N")
    scale.add_argument("--max", type=int, metavar="N")
    scale.set_defaults(run=run_scale)

    resources = msub.add_parser("resources", parents=[common], help="cores and memory kept for each replica",
                                description="Its replicas are then started again on it, one by one.")
    resources.add_argument("model")
    resources.add_argument("--cores", type=int, metavar="N")
    resources.add_argument("--memory", metavar="SIZE", help="like 8GB")
    resources.add_argument("--profile", metavar="P", help="only this profile (its number or engine)")
    resources.set_defaults(run=run_resources)

    context = msub.add_parser("context", parents=[common], help="tokens a request, slots, and the longest answer",
                              description="A new context moves the engine's arguments and the memory its KV cache "
                                          "takes; one its memory cannot hold is refused with the longest that fits. "
                                          "Its replicas are started again, one by one, each new one ready before the "
                                          "old stops. --max-output alone restarts nothing.")
    context.add_argument("model")
    context.add_argument("tokens", type=int, nargs="?", metavar="TOKENS")
    context.add_argument("--slots", type=int, metavar="N", help="requests at once (llama.cpp's --parallel)")
    context.add_argument("--max-output", type=int, metavar="TOKENS", help="the longest answer a request may ask for")
    context.set_defaults(run=run_context)

    gpus = msub.add_parser("gpus", parents=[common], help="cards each replica runs on",
                           description="Refused for a count no node has, or cards that would not hold the model and "
                                       "its context. Each new replica starts beside the old; --in-place stops each "
                                       "first where there is no room beside it (only where its node has the cards "
                                       "free once it is stopped).")
    gpus.add_argument("model")
    gpus.add_argument("count", type=int, metavar="N")
    gpus.add_argument("--profile", metavar="P", help="the profile (its number or engine) when several use cards")
    gpus.add_argument("--in-place", action="store_true", help="stop each replica before its replacement starts")
    gpus.set_defaults(run=run_gpus)

    restart = sub.add_parser("restart", parents=[common], help="start a model's replicas again, one at a time",
                             description="Replaces each replica of the model with a new one, one at a time: the "
                                         "new one starts beside the old, which stops once the new one is ready, "
                                         "so the model keeps answering. Refused for a stopped model. llmgw ctl "
                                         "replicas --model M shows how far it has got.")
    restart.add_argument("--model", required=True, metavar="M", help="the model (its name or an alias)")
    restart.set_defaults(run=run_restart)

    nodes = sub.add_parser("nodes", parents=[common], help="the nodes: hardware, what is free, their replicas")
    nodes.set_defaults(run=run_nodes)
    node = sub.add_parser("node", help="one node")
    nsub = node.add_subparsers(dest="node_command", metavar="ACTION")
    nshow = nsub.add_parser("show", parents=[common], help="a node's hardware, load, cards and replicas")
    nshow.add_argument("node", help="its name or id")
    nshow.set_defaults(run=run_node_show)

    replicas = sub.add_parser("replicas", parents=[common], help="every replica: where, its state, its download")
    replicas.add_argument("--model")
    replicas.add_argument("--node")
    replicas.add_argument("--all", action="store_true",
                          help="also the stopped replicas (left out by default; the leader keeps their rows "
                               "10 minutes)")
    replicas.add_argument("--engine", action="store_true",
                          help="with --json, each ready engine's own figures too, read from it now (the table "
                               "always shows them)")
    replicas.set_defaults(run=run_replicas)

    explain = sub.add_parser("explain-placement", parents=[common], help="every node considered for a model, and why "
                                                                       "each was refused")
    explain.add_argument("model")
    explain.set_defaults(run=run_explain)


def _client(args):
    from llmgw.cli.ctl import client

    return client(args)


def _path(name: str) -> str:
    return "/api/v1/models/" + quote(name, safe="")


def _usage(message: str) -> int:
    print(f"llmgw: {message}", file=sys.stderr)
    return 2


def _changed(args, answer) -> int:
    if args.json:
        emit_json(answer)
        return 0
    model = answer.get("model")
    if isinstance(model, dict):
        print(f"{model['name']}: {model['state']}, version {model['version']}")
    for note in answer.get("notes") or []:
        print(f"  {note}")
    return 0


def _gib(mb) -> str:
    if mb is None:
        return "-"
    return f"{mb / 1024:.1f}G"


# --- models ------------------------------------------------------------------------------------

def run_models(args) -> int:
    models = _client(args).call("GET", "/api/v1/models")
    if args.json:
        emit_json(models)
        return 0
    table(["name", "state", "replicas", "engine", "context", "source"], [
        (m["name"], m["state"], f"{m['replicas']['ready']}/{m['scaling']['min']}"
         + (f"-{m['scaling']['max']}" if m["scaling"]["max"] != m["scaling"]["min"] else "")
         + (" on demand" if m["scaling"]["on_demand"] else ""),
         ",".join(m["engines"]), m["context_length"] or "-", m["source"] or "-")
        for m in models
    ])
    # Said under the table, whole: the reason and the commands are too long for a column.
    for m in models:
        if m.get("parked"):
            print(f"{m['name']}: {m['parked']}")
    return 0


def run_add(args) -> int:
    import yaml

    from llmgw.config import parse_yaml
    from llmgw.control import SpecError, parse_spec_text

    try:
        with open(args.file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise AdminError(f"{args.file}: {(e.strerror or str(e)).lower()}") from None
    try:
        doc = parse_yaml(text)
    except yaml.YAMLError:
        try:
            parse_spec_text(text, args.file)  # says the line and column
        except SpecError as e:
            raise AdminError(str(e)) from None
        raise
    try:
        answer = _client(args).call("POST", "/api/v1/models", {"spec": doc, **({"trust": True} if args.trust else {})})
    except AdminError as e:
        if e.status == 400:
            raise AdminError(f"{args.file}: {e}", e.status, e.code) from None
        raise
    return _changed(args, answer)


def run_show(args) -> int:
    import yaml

    model = _client(args).call("GET", _path(args.model))
    if args.json:
        emit_json(model)
        return 0
    fields([("name", model["name"]), ("state", model["state"]), ("version", model["version"]),
            ("replicas", f"{model['replicas']['ready']} ready of {model['replicas']['running']}"),
            ("capabilities", ", ".join(model.get("capabilities") or []) or "none")])
    print()
    print(yaml.safe_dump(model["spec"], sort_keys=False).rstrip())
    if model.get("replica_list"):
        print()
        _replica_table(model["replica_list"])
    return 0


def run_serve(args) -> int:
    body = {"source": args.source, "engine": args.engine, "gpus": args.gpus, "context": args.context,
            "slots": args.slots, "name": args.name, "memory": args.memory, "cores": args.cores,
            "sha256": args.sha256, "min": args.min, "trust": True if args.trust else None, "layout": args.layout}
    answer = _client(args).call("POST", "/api/v1/models/serve", {k: v for k, v in body.items() if v is not None})
    return _changed(args, answer)


def run_plan(args) -> int:
    answer = _client(args).call("GET", f"/api/v1/plan?source={quote(args.source, safe='')}&context={args.context}")
    if args.json:
        emit_json(answer)
        return 0
    shape, judged = answer["shape"], answer["judged_by"]
    experts = f", a model of experts reading {shape['active_share']:.0%} of it a token" \
        if shape["active_share"] < 1 else ""
    print(f"{answer['repo']} at {answer['commit'][:12]}: {', '.join(answer['files'][:3])}"
          f"{' …' if len(answer['files']) > 3 else ''}; {shape['weights_bytes'] / 2**30:.1f} GB of "
          f"{shape['format']}{experts}; planned for {answer['context']} tokens of context")
    print(f"judged by {judged['nodes']} node(s) with {judged['cards']} card(s) as they are now"
          + (f" ({judged['left_out']} lost left out)" if judged["left_out"] else ""))
    offered = [w for w in answer["layouts"] if w["offered"]]
    refused = [w for w in answer["layouts"] if not w["offered"]]
    if offered:
        print()
        rows = []
        for i, w in enumerate(offered, 1):
            where = f"{w['cards']} × {w['card_class']}" if w["cards"] else "memory"
            parts = f"{w['weights_gb']:.1f} + {w['context_gb']:.1f} + {w['engine_gb']:.1f}"
            rows.append([str(i), w["kind"], w["engine"], where, f"{w['need_gb']:.1f} GB ({parts})",
                         f"{w['usable_gb']:.1f} GB", f"{w['tokens_per_s']:.0f}" if w["tokens_per_s"] else "?",
                         ", ".join(w["nodes"][:3]) + (" …" if len(w["nodes"]) > 3 else "")])
        table(["#", "WAY", "ENGINE", "ON", "EACH NEEDS (weights + context + engine)", "OF", "TOK/S", "NODES"], rows)
        for w in offered:
            for note in w["notes"]:
                print(f"  {w['kind']}: {note}")
    else:
        print("\nno way of running it here")
    if refused:
        print("\nnot offered:")
        for w in refused:
            where = f" × {w['cards']} {w['card_class']}" if w["cards"] else ""
            print(f"  {w['kind']}{where} on {', '.join(w['nodes'][:3]) or 'the cluster'}: {w['why_not']}")
    return 0


_LEFT_OUT = {"too big": "too big for any node", "fp8": "FP8 without a card of compute capability 8.9",
             "mlx": "MLX", "no weights": "neither GGUF nor safetensors", "pickle only": "pickle only",
             "no cards": "safetensors alone, and no node has cards"}


def run_search(args) -> int:
    answer = _client(args).call("GET", f"/api/v1/explore?q={quote(args.query, safe='')}&limit={args.limit}")
    if args.json:
        emit_json(answer)
        return 0
    judged = answer["judged_by"]
    print(f"judged by {judged['nodes']} node(s) with {judged['cards']} card(s) as they are now, at "
          f"{judged['context']} tokens of context")
    rows = []
    for c in answer["candidates"]:
        if not c["runs"] and not args.all:
            continue
        runs = [ch for ch in c["choices"] if ch["runs"]]
        formats = ", ".join(f"{ch['name']} {ch['size_gb']:.1f} GB" for ch in c["choices"][:4])
        if len(c["choices"]) > 4:
            formats += f" (+{len(c['choices']) - 4})"
        cpu = max((ch["cpu_tokens_per_s"] for ch in runs), default=0)
        gpu = max((ch["gpu_tokens_per_s"] for ch in runs), default=0)
        rows.append([c["repo"], "yes" if c["trusted"] else "no (--trust)", c["scan"] or "?", formats or "-",
                     runs[0]["way"] if runs else f"no: {_LEFT_OUT.get(c['left_out'], c['left_out'])}",
                     f"{cpu:.0f}" if cpu else "-", f"{gpu:.0f}" if gpu else "-"])
    if rows:
        table(["REPOSITORY", "TRUSTED", "SCAN", "FORMATS", "RUNS HERE", "CPU TOK/S", "GPU TOK/S"], rows)
    else:
        print("nothing found that runs here")
    left = answer["left_out"]
    if left and not args.all:
        print("left out: " + ", ".join(f"{n} {_LEFT_OUT.get(why, why)}" for why, n in sorted(left.items()))
              + " (--all lists them)")
    print("llmgw ctl model plan hf:REPO/FILE says every way one runs; llmgw ctl model serve hf:REPO/FILE adds it")
    return 0


def run_update(args) -> int:
    if args.apply:
        answer = _client(args).call("POST", _path(args.model) + "/update", {})
    else:
        answer = _client(args).call("GET", _path(args.model) + "/upstream")
    if args.json:
        emit_json(answer)
        return 0
    name, revision = answer["name"], answer["revision"]
    if answer["upstream"] == answer["commit"]:
        print(f"{name}: pinned to {answer['commit'][:12]} of {answer['repo']}, which {revision} still is; "
              "nothing changed upstream")
        return 0
    said = "was" if answer["applied"] else "is"
    print(f"{name}: pinned to {answer['commit'][:12]} of {answer['repo']}; {revision} {said} now "
          f"{answer['upstream'][:12]}")
    for f in answer["files"]:
        was = f["was"][:12] + "…" if f["was"] else "(new file)"
        print(f"  {f['name']}: sha256 {was} -> {(f['now'][:12] + '…') if f['now'] else '(not published)'}, "
              f"{f['size']} bytes")
    if not answer["files"]:
        print("  no file the model uses changed")
    if answer["applied"]:
        for note in answer.get("notes") or []:
            print(f"  {note}")
    else:
        print(f"  llmgw ctl model update {name} --apply moves it")
    return 0


# What each preset's state is called in the table; its sentence is said under it.
_PRESET_STATES = {"in_catalog": "in the catalog", "declined": "declined", "made": "made by another",
                  "kind_declined": "kind declined", "no_node": "fits no node", "to_add": "would be added",
                  "fits": "fits (auto off)"}


def run_presets(args) -> int:
    answer = _client(args).call("GET", "/api/v1/presets")
    if args.json:
        emit_json(answer)
        return 0
    presets = answer["presets"]
    table(["name", "makes", "card", "state"],
          [(p["name"], p["makes"], p["card"], _PRESET_STATES.get(p["state"], p["state"])) for p in presets])
    print()
    for p in presets:
        print(f"{p['name']}: {p['what']}; {p['said']}")
        if p.get("error"):
            print(f"  its last try failed: {p['error']}")
    print()
    if answer["auto"]:
        print("presets.auto is on: the leader adds a preset where a node with ComfyUI fits it and the catalog makes "
              "nothing of its kind (llmgw ctl model presets auto off)")
    else:
        print("presets.auto is off: a preset is added only by hand (llmgw ctl model presets add NAME)")
    return 0


def run_preset_add(args) -> int:
    return _changed(args, _client(args).call("POST", "/api/v1/presets/" + quote(args.preset, safe=""), {}))


def run_presets_auto(args) -> int:
    answer = _client(args).call("POST", "/api/v1/presets/auto", {"on": args.switch == "on"})
    if args.json:
        emit_json(answer)
        return 0
    print(f"presets.auto: {'on' if answer['auto'] else 'off'}")
    return 0


def run_stop(args) -> int:
    return _changed(args, _client(args).call("POST", _path(args.model) + "/stop", {}))


def run_start(args) -> int:
    return _changed(args, _client(args).call("POST", _path(args.model) + "/start", {}))


def run_remove(args) -> int:
    answer = _client(args).call("DELETE", _path(args.model), query={"purge": "true" if args.purge else None})
    if args.json:
        emit_json(answer)
        return 0
    print(f"{answer['model']}: removed")
    for note in answer.get("notes") or []:
        print(f"  {note}")
    return 0


def run_scale(args) -> int:
    if args.min is None and args.max is None:
        return _usage("model scale needs --min, --max or both")
    return _changed(args, _client(args).call("POST", _path(args.model) + "/scale",
                                             {"min": args.min, "max": args.max}))


def run_resources(args) -> int:
    if args.cores is None and args.memory is None:
        return _usage("model resources needs --cores, --memory or both")
    return _changed(args, _client(args).call("POST", _path(args.model) + "/resources",
                                             {"cores": args.cores, "memory": args.memory, "profile": args.profile}))


def run_context(args) -> int:
    if args.tokens is None and args.slots is None and args.max_output is None:
        return _usage("model context needs TOKENS, --slots or --max-output")
    return _changed(args, _client(args).call("POST", _path(args.model) + "/context",
                                             {"tokens": args.tokens, "slots": args.slots,
                                              "max_output": args.max_output}))


def run_gpus(args) -> int:
    return _changed(args, _client(args).call("POST", _path(args.model) + "/gpus",
                                             {"count": args.count, "profile": args.profile,
                                              "in_place": args.in_place}))


def run_restart(args) -> int:
    answer = _client(args).call("POST", _path(args.model) + "/restart", {})
    if args.json:
        emit_json(answer)
        return 0
    count = answer["replicas"]
    name = answer["model"]["name"]
    print(f"{name}: restarting {count} replica{'s' if count != 1 else ''}" if count else f"{name}: nothing to restart")
    for note in answer.get("notes") or []:
        print(f"  {note}")
    return 0


# --- nodes and replicas ------------------------------------------------------------------------

def _cards(gpus: list[dict]) -> str:
    if not gpus:
        return "-"
    counts: dict[str, int] = {}
    for g in gpus:
        counts[g["class"]] = counts.get(g["class"], 0) + 1
    return ", ".join(f"{n}×{cls}" for cls, n in counts.items())


def run_nodes(args) -> int:
    nodes = _client(args).call("GET", "/api/v1/nodes")
    if args.json:
        emit_json(nodes)
        return 0
    table(["name", "state", "cores", "memory", "gpus", "engines", "replicas", "heard"], [
        (n["name"], n["state"], f"{n.get('free', {}).get('cores', '-')}/{n['cores']}",
         f"{_gib(n.get('free', {}).get('memory_mb'))}/{_gib(n['memory_mb'])}", _cards(n["gpus"]),
         ",".join(sorted(n["engines"])) or "-", n["replicas"], ago(n["heartbeat_at"]))
        for n in nodes
    ])
    return 0


def run_node_show(args) -> int:
    node = _client(args).call("GET", "/api/v1/nodes/" + quote(args.node, safe=""))
    if args.json:
        emit_json(node)
        return 0
    host = node.get("host") or {}
    fields([
        ("name", f"{node['name']} ({node['id']})"), ("state", node.get("lost") or node["state"]),
        ("heard", ago(node["heartbeat_at"])), ("version", node.get("version") or "-"),
        ("system", " ".join(x for x in (host.get("os"), host.get("kernel"), host.get("arch")) if x) or "-"),
        ("cpu", f"{host.get('cpu_model') or '-'}: {node.get('free', {}).get('cores', '-')} of {node['cores']} "
                "cores free"),
        ("memory", f"{_gib(node.get('free', {}).get('memory_mb'))} of {_gib(node['memory_mb'])} free"),
        ("labels", ", ".join(f"{k}={v}" for k, v in sorted(node["labels"].items())) or "-"),
        ("engines", ", ".join(f"{k} {v}" for k, v in sorted(node["engines"].items())) or "-"),
    ])
    if node["gpus"]:
        print()
        table(["gpu", "class", "name", "memory", "other programs", "free", "cc"], [
            (g["index"], g["class"], g["name"], _gib(g["memory_mb"]), _gib(g["foreign_mb"]), _gib(g["free_mb"]),
             g["compute_capability"] or "-") for g in node["gpus"]
        ])
    if node.get("replica_list"):
        print()
        _replica_table(node["replica_list"])
    return 0


def _replica_table(replicas: list[dict]) -> None:
    def status(r):
        fetch = r.get("fetch")
        if fetch and r["state"] in ("pending", "starting"):
            done, total = fetch.get("bytes_done", 0), fetch.get("bytes_total", 0)
            said = f"{done / 2**30:.1f} of {total / 2**30:.1f} GiB" if total else f"{done / 2**30:.1f} GiB"
            return f"{fetch.get('phase') or 'fetching'} {said}"
        return r["message"] or ""

    table(["id", "model", "node", "state", "desired", "since", "url", "engine", "detail"], [
        (r["id"], r["model"], r["node"], r["state"], r["desired"], ago(r["since"]), r["url"] or "-",
         engine_said(r.get("engine"), r.get("cached_blocks")), status(r))
        for r in replicas
    ])


def engine_said(figures: dict | None, cached_blocks: int | None = None) -> str:
    """A ready engine's own figures in a few words: "2 running, 1 waiting, KV 31%, cache hits 74%, TTFT 41 ms", and
    the blocks its prefix cache holds where its agent follows its KV events."""
    blocks = [] if cached_blocks is None else [f"{cached_blocks} blocks cached"]
    if not figures:
        return ", ".join(blocks) or "-"
    said = [f"{figures['running']:g} running", f"{figures['waiting']:g} waiting"]
    if figures.get("kv_usage") is not None:
        said.append(f"KV {figures['kv_usage']:.0%}")
    if figures.get("prefix_hit_rate") is not None:
        said.append(f"cache hits {figures['prefix_hit_rate']:.0%}")
    if figures.get("ttft_s") is not None:
        said.append(f"TTFT {figures['ttft_s'] * 1000:.0f} ms")
    return ", ".join(said + blocks)


# A stopped replica's row stays in the store for a while (the leader forgets
# it 10 minutes after the stop, control/reconciler.py FORGET_AFTER): after
# four runs of build.py the table was 15 rows of old stops around the one
# that ran. Failed ones stay in the table: their message says what to mend.
def run_replicas(args) -> int:
    query = {"model": args.model, "node": args.node}
    if args.engine or not args.json:
        query["engine"] = "1"
    replicas = _client(args).call("GET", "/api/v1/replicas", query=query)
    hidden = [] if args.all else [r for r in replicas if r["state"] == "stopped"]
    replicas = [r for r in replicas if r not in hidden]
    if args.json:
        emit_json(replicas)
        return 0
    _replica_table(replicas)
    if hidden:
        print(f"({len(hidden)} stopped {'replica' if len(hidden) == 1 else 'replicas'} not shown; --all shows them)")
    return 0


def run_explain(args) -> int:
    from llmgw.control import action_line

    e = _client(args).call("GET", _path(args.model) + "/placement")
    if args.json:
        emit_json(e)
        return 0
    print(f"{e['model']}: {e['state']}; wants {e['wanted']}, {e['running']} running, {e['ready']} ready")
    for note in e["notes"]:
        print(f"  {note}")
    print()
    rows = []
    for n in e["nodes"]:
        verdict = "fits" if n["fits"] else "refused"
        reasons = n["reasons"]
        if n["fits"]:
            fitting = [p for p in n["profiles"] if p["fits"]]
            reasons = [f"profile {fitting[0]['profile']} ({fitting[0]['engine']}); free: {n['free']}"]
        for i, reason in enumerate(reasons or [""]):
            rows.append((n["name"] if i == 0 else "", verdict if i == 0 else "", n["replicas"] if i == 0 else "",
                         reason))
    table(["node", "verdict", "here", "why"], rows)
    if e["actions"]:
        print()
        print("a placement pass now would:")
        for a in e["actions"]:
            print(f"  {action_line(a)}")
    return 0
