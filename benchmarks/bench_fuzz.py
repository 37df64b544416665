"""Hostile requests against a real gateway: 30,000 of them, no 5xx and no traceback allowed.

A real `llmgw server` with the baseline guardrail policy on and a real
sim-engine behind it (llmgw/benchmark/fuzz.py), sent the cases of
llmgw/benchmark/fuzzcases.py on every /v1 route and the admin API, 16 at a
time. Prints fuzz_requests, fuzz_5xx, fuzz_unanswered, fuzz_tracebacks,
fuzz_throughput (req/s) and a count for each status, then what answered
what. Exits 1 on any 5xx, unanswered request or traceback, printing the
first cases with the seed and index that send them again:
`LLMGW_FUZZ_SEED=N python3 build.py bench fuzz`.
"""

import os
import sys

from llmgw.benchmark.fuzz import main

if __name__ == "__main__":
    seed = os.environ.get("LLMGW_FUZZ_SEED")
    sys.exit(main(count=int(os.environ.get("LLMGW_FUZZ_COUNT", "30000")), seed=int(seed) if seed else None))
