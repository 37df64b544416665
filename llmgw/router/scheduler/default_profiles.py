"""The built-in routing profiles, registered exactly as a site's own would be.

The weights are sized against the scorers' 0..1 range: in `chat` the session
weighs more than everything else can add up to, so a conversation stays on
its replica (unless the session scorer itself lets go of a far busier one)
and the rest only orders the others, for retries and for requests with no
session. In `long-context` free KV cache counts twice what the queue does:
a long prompt on a replica with no room for it is evicted and read again.
In `prefix-cache` the share of the prompt an engine already holds counts half
again what the queue does: a replica holding a long shared system prompt is
worth a request or two of waiting, not a queue twice as long (docs/routing.md).
"""

from llmgw.router.scheduler.base import register_profile

register_profile(
    "chat", {"session": 10.0, "latency": 1.0, "queue": 1.0, "kv": 0.5},
    "keeps a conversation on one replica and favours the one answering soonest")
register_profile(
    "batch", {"queue": 1.0},
    "the shortest queue")
register_profile(
    "long-context", {"kv": 2.0, "queue": 1.0},
    "the most free KV cache, then the shortest queue")
register_profile(
    "prefix-cache", {"prefix": 1.5, "queue": 1.0, "kv": 0.25},
    "the replica whose prefix cache holds most of the prompt, against how busy it is")
