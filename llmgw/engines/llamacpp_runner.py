"""llama.cpp's server, from the xllamacpp wheel, started with llama-server's flags.

The xllamacpp wheel is llama.cpp's own C++ server (the one `llama-server`
is), prebuilt for CPUs and published on PyPI; it is driven from Python
through `xllamacpp.CommonParams` instead of a command line. This module is
that command line: it takes the flags the llamacpp adapter gives
llama-server, fills CommonParams with them and serves until SIGTERM or
SIGINT, so the agent runs it exactly as it would run a llama-server binary.

It imports nothing but the standard library and xllamacpp, because the
agent copies this file into the engine's own environment
(DATA/engines/llamacpp-VERSION, see llamacpp_install.py), where llmgw and
its dependencies are not installed. `llmgw llama-server` runs the same code.

A flag llama-server has and this runner does not is refused by name (exit
2), never ignored: a profile's --mlock silently dropped would be a node
that behaves unlike the one the profile was written for.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Literal, NoReturn

PROG = "llama-server (xllamacpp)"
STOP_WAIT = 5.0  # seconds a stop waits for open connections before it ends the process


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _layers(text: str) -> int:
    # llama-server takes a count, or "auto" / "all".
    if text in ("auto",):
        return -1
    if text in ("all",):
        return 999
    return _int(text)


def _on_off_auto(text: str) -> str:
    if text not in ("on", "off", "auto"):
        raise argparse.ArgumentTypeError(f"expected on, off or auto, got {text!r}")
    return text


# (flags, dest, what it takes: "flag" | a converter, help). One table makes
# the parser and the argv that `llmgw llama-server` hands on to the engine's
# environment, so the two cannot disagree.
FLAGS: list[tuple[tuple[str, ...], str, Literal["flag"] | Callable[[str], object], str]] = [
    (("-m", "--model"), "model", str, "the GGUF file to serve"),
    (("-a", "--alias"), "alias", str, "the model's name in /v1/models and answers; several separated by commas"),
    (("--host",), "host", str, "the address to listen on (default 127.0.0.1)"),
    (("--port",), "port", _int,
     "the port to listen on (default 8080; 0 picks a free one, shown in the line it prints)"),
    (("-c", "--ctx-size"), "ctx_size", _int, "the context, shared by the slots (default 0: the model's own)"),
    (("-np", "--parallel"), "parallel", _int, "requests served at once, each a slot of the context (default 1)"),
    (("-t", "--threads"), "threads", _int, "threads for generation (default: llama.cpp's choice)"),
    (("-tb", "--threads-batch"), "threads_batch", _int, "threads for prompt processing (default: --threads)"),
    (("--threads-http",), "threads_http", _int, "threads answering HTTP (default: llama.cpp's choice)"),
    (("-b", "--batch-size"), "batch_size", _int, "logical batch size (default 2048)"),
    (("-ub", "--ubatch-size"), "ubatch_size", _int, "physical batch size (default 512)"),
    (("-ngl", "--gpu-layers", "--n-gpu-layers"), "gpu_layers", _layers,
     "layers on the GPU: a number, auto or all (the CPU wheel has no GPU and keeps every layer on the CPU)"),
    (("-n", "--predict", "--n-predict"), "n_predict", _int, "most tokens an answer may have (default -1: no limit)"),
    (("-s", "--seed"), "seed", _int, "the sampler's seed"),
    (("--temp",), "temp", _float, "default temperature"),
    (("--top-k",), "top_k", _int, "default top-k"),
    (("--top-p",), "top_p", _float, "default top-p"),
    (("--min-p",), "min_p", _float, "default min-p"),
    (("-cram", "--cache-ram"), "cache_ram", _int,
     "MiB of RAM for the prompt cache (default 8192; 0 turns it off, as judges run; -1 no limit)"),
    (("-ctk", "--cache-type-k"), "cache_type_k", str, "the K cache's type: f16, q8_0, ..."),
    (("-ctv", "--cache-type-v"), "cache_type_v", str, "the V cache's type: f16, q8_0, ..."),
    (("-fa", "--flash-attn"), "flash_attn", _on_off_auto, "flash attention: on, off or auto"),
    (("--embedding", "--embeddings"), "embeddings", "flag",
     "serve /v1/embeddings (an embedding model) instead of chat"),
    (("--pooling",), "pooling", str, "pooling for embeddings: none, mean, cls, last, rank"),
    (("--reranking", "--rerank"), "rerank", "flag", "serve /v1/rerank"),
    (("--metrics",), "metrics", "flag", "serve Prometheus metrics at /metrics"),
    (("--slots",), "slots", "flag", "serve /slots"),
    (("--no-slots",), "no_slots", "flag", "do not serve /slots"),
    (("--props",), "props", "flag", "let POST /props change settings"),
    (("--api-key",), "api_key", str,
     "the key requests must bring; several separated by commas (prefer --api-key-file)"),
    (("--api-key-file",), "api_key_file", str, "a file of keys, one a line, that requests must bring"),
    (("--jinja",), "jinja", "flag", "use the model's Jinja chat template (the default)"),
    (("--no-jinja",), "no_jinja", "flag", "use llama.cpp's built-in chat templates"),
    (("--chat-template",), "chat_template", str, "a chat template, or the name of one of llama.cpp's"),
    (("--reasoning-format",), "reasoning_format", str, "none, auto, deepseek or deepseek-legacy"),
    (("--context-shift",), "context_shift", "flag", "drop old tokens when the context is full"),
    (("--no-context-shift",), "no_context_shift", "flag", "stop an answer when the context is full (the default)"),
    (("--cont-batching", "-cb"), "cont_batching", "flag", "continuous batching (the default)"),
    (("--no-cont-batching", "-nocb"), "no_cont_batching", "flag", "no continuous batching"),
    (("--kv-unified", "-kvu"), "kv_unified", "flag", "one KV buffer shared by every slot"),
    (("--swa-full",), "swa_full", "flag", "a full-size cache for sliding-window attention"),
    (("--no-warmup",), "no_warmup", "flag", "skip the empty run at start"),
    (("--no-webui",), "no_webui", "flag", "no web page at / (the wheel carries none anyway)"),
    (("--timeout", "-to"), "timeout", _int, "seconds a connection may stay silent (default 3600)"),
    (("--sleep-idle-seconds",), "sleep_idle_seconds", _int, "unload the model after this long without a request"),
    (("--log-disable",), "log_disable", "flag", "write no log"),
    (("-v", "--verbose"), "verbose", "flag", "log everything"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """llama-server's flags that this runner serves, on `parser`."""
    for names, dest, kind, text in FLAGS:
        if kind == "flag":
            parser.add_argument(*names, dest=dest, action="store_true", help=text)
        else:
            parser.add_argument(*names, dest=dest, type=kind, default=None, help=text,
                                metavar=dest.upper().replace("_", "-"))


def to_argv(args: argparse.Namespace) -> list[str]:
    """The flags again, from what add_arguments' parser made of them."""
    argv: list[str] = []
    for names, dest, kind, _ in FLAGS:
        value = getattr(args, dest, None)
        long = next((n for n in names if n.startswith("--")), names[0])
        if kind == "flag":
            if value:
                argv.append(long)
        elif value is not None:
            argv += [long, str(value)]
    return argv


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # No usage block: this lands in the agent's log ring for the shard,
        # where the one sentence is what a person needs.
        self.exit(2, f"{self.prog}: {message}; this runner serves the llama-server flags --help lists, "
                     f"and a llama-server binary named in agent.yaml (engines.llamacpp.binary) takes them all\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, allow_abbrev=False,
                description="llama.cpp's server from the xllamacpp wheel, with llama-server's flags.")
    add_arguments(p)
    return p


def _read_keys(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def build_params(args: argparse.Namespace, xlc):
    """CommonParams for `args`; ValueError with a sentence for what cannot be."""
    if not args.model:
        raise ValueError("no model: give --model PATH.gguf")
    if not os.path.isfile(args.model):
        raise ValueError(f"the model {args.model} is not a file")
    p = xlc.CommonParams()
    p.model.path = args.model
    p.hostnames = [args.host or "127.0.0.1"]
    p.port = 8080 if args.port is None else args.port
    if args.alias:
        p.model_alias = {a.strip() for a in args.alias.split(",") if a.strip()}
    if args.ctx_size is not None:
        p.n_ctx = args.ctx_size
    if args.parallel is not None:
        p.n_parallel = args.parallel
    if args.threads is not None:
        p.cpuparams.n_threads = args.threads
    if args.threads_batch is not None:
        p.cpuparams_batch.n_threads = args.threads_batch
    elif args.threads is not None:
        p.cpuparams_batch.n_threads = args.threads
    if args.threads_http is not None:
        p.n_threads_http = args.threads_http
    if args.batch_size is not None:
        p.n_batch = args.batch_size
    if args.ubatch_size is not None:
        p.n_ubatch = args.ubatch_size
    if args.gpu_layers is not None:
        p.n_gpu_layers = args.gpu_layers
    if args.n_predict is not None:
        p.n_predict = args.n_predict
    if args.seed is not None:
        p.sampling.seed = args.seed
    for dest, field in (("temp", "temp"), ("top_k", "top_k"), ("top_p", "top_p"), ("min_p", "min_p")):
        if getattr(args, dest) is not None:
            setattr(p.sampling, field, getattr(args, dest))
    if args.cache_ram is not None:
        p.cache_ram_mib = args.cache_ram
    for dest, field in (("cache_type_k", "cache_type_k"), ("cache_type_v", "cache_type_v")):
        name = getattr(args, dest)
        if name is not None:
            member = "GGML_TYPE_" + name.upper()
            if member not in xlc.ggml_type.__members__:
                raise ValueError(f"--{dest.replace('_', '-')} {name} is not a cache type llama.cpp knows")
            setattr(p, field, xlc.ggml_type.__members__[member])
    if args.flash_attn is not None:
        p.flash_attn_type = {
            "on": xlc.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            "off": xlc.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED,
            "auto": xlc.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_AUTO,
        }[args.flash_attn]
    if args.embeddings:
        p.embedding = True
    if args.pooling is not None:
        member = "LLAMA_POOLING_TYPE_" + args.pooling.upper()
        if member not in xlc.llama_pooling_type.__members__:
            raise ValueError(f"--pooling {args.pooling}: expected none, mean, cls, last or rank")
        p.pooling_type = xlc.llama_pooling_type.__members__[member]
    if args.rerank:
        p.embedding = True
        p.pooling_type = xlc.llama_pooling_type.LLAMA_POOLING_TYPE_RANK
    p.endpoint_metrics = bool(args.metrics)
    if args.slots:
        p.endpoint_slots = True
    if args.no_slots:
        p.endpoint_slots = False
    if args.props:
        p.endpoint_props = True
    keys: list[str] = []
    if args.api_key:
        keys += [k.strip() for k in args.api_key.split(",") if k.strip()]
    if args.api_key_file:
        try:
            keys += _read_keys(args.api_key_file)
        except OSError as e:
            raise ValueError(f"cannot read the API key file {args.api_key_file}: {e.strerror}") from None
        if not keys:
            raise ValueError(f"the API key file {args.api_key_file} has no key in it")
    if keys:
        p.api_keys = keys
    if args.no_jinja:
        p.use_jinja = False
    if args.chat_template is not None:
        p.chat_template = args.chat_template
    if args.reasoning_format is not None:
        member = "COMMON_REASONING_FORMAT_" + args.reasoning_format.upper().replace("-", "_")
        if member not in xlc.common_reasoning_format.__members__:
            raise ValueError(f"--reasoning-format {args.reasoning_format}: expected none, auto, deepseek "
                             "or deepseek-legacy")
        p.reasoning_format = xlc.common_reasoning_format.__members__[member]
    if args.context_shift:
        p.ctx_shift = True
    if args.no_context_shift:
        p.ctx_shift = False
    if args.no_cont_batching:
        p.cont_batching = False
    if args.kv_unified:
        p.kv_unified = True
    if args.swa_full:
        p.swa_full = True
    if args.no_warmup:
        p.warmup = False
    if args.no_webui:
        p.ui = False
    if args.timeout is not None:
        p.timeout_read = args.timeout
        p.timeout_write = args.timeout
    if args.sleep_idle_seconds is not None:
        p.sleep_idle_seconds = args.sleep_idle_seconds
    if args.log_disable:
        p.verbosity = -1
    if args.verbose:
        p.verbosity = 99
    return p


def serve(args: argparse.Namespace) -> int:
    """Load the model, serve until SIGTERM or SIGINT, stop cleanly. The exit code."""
    try:
        import xllamacpp as xlc
    except ImportError as e:
        print(f"{PROG}: xllamacpp is not installed in {sys.executable}'s environment ({e}); "
              "`llmgw llama-server` installs it into an engine environment of its own", file=sys.stderr)
        return 1
    try:
        params = build_params(args, xlc)
    except ValueError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    # Before the model loads: a SIGTERM during a long load must still stop us
    # at once, the way llama-server stops, not after the load finishes.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    started = time.monotonic()
    try:
        server = xlc.Server(params)
    except Exception as e:  # noqa: BLE001 - the extension raises plain RuntimeError/ValueError
        print(f"{PROG}: llama.cpp could not load {args.model}: {e}", file=sys.stderr)
        return 1
    names = ",".join(sorted(params.model_alias)) or os.path.basename(args.model)
    print(f"{PROG}: xllamacpp {getattr(xlc, '__version__', '?')} serving {names} at {server.listening_address} "
          f"(loaded in {time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        # The destructor stops the HTTP server and waits for the slots' loop,
        # so the port is closed before we say we stopped. It also waits for
        # every open connection, an idle keep-alive one from the gateway
        # included, which held each stop to the supervisor's whole grace
        # (30 s). So it runs aside, and past STOP_WAIT the process just ends.
        held = [server]
        del server
        closed = threading.Event()

        def close() -> None:
            held.clear()
            closed.set()

        threading.Thread(target=close, daemon=True).start()
        if not closed.wait(STOP_WAIT):
            print(f"{PROG}: stopped (connections still open after {STOP_WAIT:g} s were dropped)",
                  file=sys.stderr, flush=True)
            os._exit(0)
    print(f"{PROG}: stopped", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    return serve(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
