"""What the gateway adds to a request: the targets of the client API, measured.

Runs `llmgw ctl bench overhead`'s steps (see llmgw/benchmark/overhead.py):
concurrency 1 (added p50/p99), concurrency 32 (requests/s), and 64-token
streams at concurrency 64 (streams/s), each straight to an instant sim-engine
and through a real gateway with authentication and accounting on; c1 again
with the `baseline` guardrail policy on every request (`guard.*`, its cost
over slices with it off in `guard.cost_p50_ms`); c1 again with tracing at
sample_ratio 0 and 1 taking turns with it off (`traces.*`); then c32 and s64 through a
gateway with two worker processes (`workers.*`), unpinned, with the scaling
against one process; then, where nginx is installed (`apt-get install nginx`),
c1, c32 and s64 through a gateway in front of nginx serving fixed answers
(`nginx.*`): the gateway's own figures, with an engine that takes no time.
Steps of 3 s keep the whole run inside the 60 s a bench is given.
"""

import sys

from llmgw.benchmark.overhead import overhead

if __name__ == "__main__":
    overhead(seconds=3.0, traces=True)
    sys.exit(0)
