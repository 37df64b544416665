"""The sim's /metrics, under vLLM's names, so a router's scraper reads it as it reads vLLM."""

from __future__ import annotations

# A running request is counted as holding 1/64 of the KV cache: enough that a
# router's kv scorer sees the difference between two sims with 8 and 24
# streams, and the cache is "full" at a load a test can make.
KV_SLOTS = 64


class Metrics:
    __slots__ = ("model", "running", "waiting", "prompt_tokens", "generation_tokens", "cache")

    def __init__(self, model: str, cache=None):
        self.model = model
        self.cache = cache  # a prefixcache.PrefixCache: its lookups counted as vLLM's prefix cache counts them
        self.running = 0
        # Only --hang makes requests wait: they are accepted and never scheduled.
        self.waiting = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0

    def kv_usage(self) -> float:
        return min(1.0, self.running / KV_SLOTS)

    def render(self) -> bytes:
        label = '{model_name="' + self.model.replace("\\", "\\\\").replace('"', '\\"') + '"}'
        kv = self.kv_usage()
        rows: tuple[tuple[str, str, str, str, float], ...] = (
            ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
             "", self.running),
            ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
             "", self.waiting),
            ("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.",
             "", kv),
            ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", "", kv),
            ("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", "_total",
             self.prompt_tokens),
            ("vllm:generation_tokens", "counter", "Number of generation tokens processed.", "_total",
             self.generation_tokens),
        )
        if self.cache is not None:
            rows += (
                ("vllm:prefix_cache_queries", "counter", "Prefix cache queries, in terms of number of queried tokens.",
                 "_total", self.cache.queries),
                ("vllm:prefix_cache_hits", "counter", "Prefix cache hits, in terms of number of cached tokens.",
                 "_total", self.cache.hits),
            )
        out = []
        for name, kind, doc, suffix, value in rows:
            out.append(f"# HELP {name}{suffix} {doc}\n# TYPE {name}{suffix} {kind}\n"
                       f"{name}{suffix}{label} {float(value)!r}\n")
        return "".join(out).encode()
