"""Worker processes: the client API served by several processes of one machine.

The pool (pool.py) is the main process's side: it starts, feeds, watches
and stops them. The worker (worker.py) is a worker process's side. They
talk over one socketpair each (channel.py) in the dataclasses of
messages.py. This page is how the two fit together.

One Python process answers from one core. With `workers: N` the client API
is served by N worker processes, each with its own event loop, store
connection, key cache, router (registry, admission, engine connections) and
usage writer, and the main process keeps everything there is one of: the
lease, the cluster settings' seeding, the admin API, the agent port and
/metrics. The main process also restarts a worker that dies.

Ports. The main process takes the client port exactly as a single process
does (bind without SO_REUSEPORT, so a second `llmgw server` on the machine,
with workers or without, is refused with the usual sentence), then marks it
SO_REUSEPORT and opens one more socket on it per further worker. The kernel
deals each new connection to one socket of the group by a hash of its
addresses, so idle workers share the load evenly: one socket shared by all,
as gunicorn does, was tried and gave every request to the same worker while
the others slept, since the first worker woken for a connection takes it.

Every worker inherits every socket, and accepts on its own. The main
process keeps them all open for its whole life, so a socket's queue
outlives its worker: connections the kernel deals to a worker that died,
was killed or is restarting are held in that queue, not refused, and as
the worker's channel closes the main process tells the serving workers to
accept on it too (an "orphan") until the replacement serves. So the port
is never unguarded and no connection still queued is lost. A worker's
death does cost the connections it had already taken: they close as it
dies, with any request in flight on them. With every worker down at
once, nobody is left to take the queues: their connections wait there
for the replacements (after the restart's backoff, 0.5 s doubling to
30 s), and a queue holding LISTEN_BACKLOG takes no more until it drains.

Counts. Every 100 ms (SHARE_INTERVAL) each worker sends the main process
what it counted since its last report: its RateLimiter's and its Budgets'
snapshot() deltas, one message (Counts) over a unix socket, never a
message per request. The main process gathers the reports that arrive
within 10 ms of each other and sends each worker the others' deltas, which it merges
(RateLimiter.merge, Budgets.merge). This is active-active control planes'
exchange (every 2 s, through the leader) on one machine and at a
twentieth of the interval. For requests a minute that was not enough: a
burst of 200 at once got 60 through each worker before either heard of the
other. So a worker admits a request only with a loan from the main
process's minute, asked for over the same socket (Borrow, answered by
Lent) and spent without asking again; a report's counts settle the loans
they spent and give back the ones idle for a second (accounting/lending.py).
Within the machine a burst is held to the limit. Tokens and budgets, known
only after an answer, keep the sharing's bound: what the workers let
through in about 100 ms (up to 110 ms plus a busy loop's delay) before they
hear of each other. Budgets are also caught up from the store every 30 s; why that does
not count a worker's spend twice is in accounting/budgets.py. The main
process merges every report into a limiter of its own too, and a worker
that (re)starts is given its whole minute first: a restart does not hand
every key a fresh minute. Its budgets it reads from the store, missing what
the other workers have not written yet (half a second of rows) until their
shares arrive.

Metrics. Once a second a worker's report carries its registry's samples
(counters, histograms, and the gauges read at scrape time). The main
process's /metrics shows their sums: breakers and the usage writer's lag
show the largest worker's figure instead; a worker that exits leaves its
counters and histograms in the sums, so they never go backwards at a
restart. Figures are up to a second old.

Leadership. /leader and /health answer on the client port in the workers:
the main process tells them the lease's state on every change and every
half second; a worker that has not heard for 3 s stops saying it leads.

Keys. A key revoked or a limit changed through the admin API is dropped
from every worker's key cache at once, as it is from the main process's.

Stopping. SIGTERM (or SIGINT) to the main process sends SIGTERM to every
worker, which stops taking connections, finishes its requests and writes
its usage rows; then the main process stops the rest. A worker whose main
process goes away (its socket to it closes) stops the same way.
"""

from llmgw.control.workers.channel import WorkerFailed
from llmgw.control.workers.pool import FannedKeys, WorkerPool, worker_command
from llmgw.control.workers.worker import run_worker

__all__ = ["FannedKeys", "WorkerFailed", "WorkerPool", "run_worker", "worker_command"]
