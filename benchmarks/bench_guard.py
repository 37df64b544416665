"""What the guardrails' pattern checks cost a request, in-process.

Prints, for a one-word prompt (as bench_overhead sends) and prompts of 1 KB and 8 KB of ordinary prose (with numbers,
dates and an address or two, none of them a finding):
  guard_baseline_hi_us / _1k_us / _8k_us: check_input under the `baseline` policy
    init installs (secrets blocked, cards redacted, injection flagged)
  guard_all_1k_us / _8k_us: every pattern rule on (all PII kinds redacted,
    names included), the most a policy can ask of the patterns
  guard_tools_us / shapes_tools_us: a 1 KB prompt beside 20 tools (a coding agent's: ~400-character
    descriptions, 6 described parameters each, ~24 KB in all) under the baseline, and the body's shape check
  guard_output_8k_us: an 8 KB answer streamed in 20-character deltas
    through the baseline's output rules, released as it comes less what may still become a value
  guard_resolve_ns: finding a key's effective policy (the cached lookup)
Median of repeated runs, one core. The issue's budget: the baseline's
added p50 on a request within 0.2 ms.

Then, through a real gateway in front of a sim-engine writing 5 tokens a
second (a slow model on CPUs), the time from sending a streamed chat
request to its first visible word, median of rounds taking turns:
  guard_ttft_none_ms: no policy (guard.default [])
  guard_ttft_baseline_ms: the baseline on every request; guard_ttft_added_ms the difference
    (issue 25, item 11's target: within 50 ms)
  guard_ttft_sentence_ms: the baseline beside a policy whose deny pattern has no bounded length,
    which keeps releasing a sentence at a time: how long the bubble stayed empty before (the sim's
    answer has no full stop, so its first word shows with its last)
"""

from __future__ import annotations

import json
import statistics
import time

from llmgw.config.guard import Policy, Rules
from llmgw.config.loader import from_dict
from llmgw.guard.gate import OutputChecker, check_input
from llmgw.guard.policy import baseline_policy, combine_policies

PROSE = (
    "Thanks for the update on the migration. We moved 1,250 accounts on 05.11.2023 and the rest follow "
    "next week; order 20231105-7781 is the one that failed, see ticket #44812. The dashboard at "
    "https://status.example.com/board shows p99 at 412 ms, up from 380 ms in October. Could you check "
    "whether the retry budget of 3 is enough when the upstream answers slowly? Contact ops@example.com "
    "if the queue passes 10 000 items. Version 2.14.3 fixed the leak; 2.15 is due on 2024-01-15. "
)


def _prompt(size: int) -> dict:
    text = (PROSE * (size // len(PROSE) + 1))[:size]
    return {"model": "m", "messages": [{"role": "system", "content": "You are a helpful assistant."},
                                       {"role": "user", "content": text}]}


def _median_us(fn, seconds: float = 1.5) -> float:
    samples = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        samples.append((time.perf_counter() - t0) / 20)
    return statistics.median(samples) * 1e6


def main() -> None:
    baseline = combine_policies([("baseline", from_dict(Policy, baseline_policy()))])
    everything = combine_policies([("all", Policy(input=Rules(
        secrets="block", cards="redact", injection="flag",
        pii={"email": "redact", "phone": "redact", "iban": "redact", "national_id": "redact", "person": "redact"},
        restore=True)))])
    hi = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    print(f"guard_baseline_hi_us: {_median_us(lambda: check_input(baseline, hi, 'chat'), 0.5):.1f} us")
    for size, label in ((1024, "1k"), (8192, "8k")):
        body = _prompt(size)
        print(f"guard_baseline_{label}_us: {_median_us(lambda body=body: check_input(baseline, body, 'chat')):.1f} us")
        print(f"guard_all_{label}_us: {_median_us(lambda body=body: check_input(everything, body, 'chat')):.1f} us")

    from llmgw.router import shapes
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": PROSE[:400],
        "parameters": {"type": "object", "required": ["path"], "properties": {
            f"arg_{j}": {"type": "string", "description": PROSE[j * 40:j * 40 + 120]} for j in range(6)}}}}
        for i in range(20)]
    agent = {**_prompt(1024), "tools": tools}
    print(f"guard_tools_us: {_median_us(lambda: check_input(baseline, agent, 'chat')):.1f} us")
    print(f"shapes_tools_us: {_median_us(lambda: shapes.check('chat', agent)):.1f} us")

    answer = (PROSE * 40)[:8192]
    deltas = [answer[i:i + 20] for i in range(0, len(answer), 20)]

    def stream() -> None:
        checker = OutputChecker(baseline, None)
        for d in deltas:
            checker.feed(d)
        checker.flush()

    print(f"guard_output_8k_us: {_median_us(stream):.1f} us")

    from llmgw.account import Effective
    from llmgw.account.keycache import Principal
    from llmgw.config.guard import GuardSettings
    from llmgw.guard.policy import Resolver
    from llmgw.store.records import ApiKey, Org, Project, ProjectPath, Team
    settings = GuardSettings(default=["baseline"], policies={"baseline": from_dict(Policy, baseline_policy())})
    principal = Principal(ApiKey("k1", "ci", "p1", b"", "sk-llmgw-ab"),
                          ProjectPath(Org("o1", "Acme"), Team("t1", "o1", "ml"), Project("p1", "t1", "chat")),
                          Effective())
    resolver = Resolver()
    resolver.effective(settings, 1, principal)
    print(f"guard_resolve_ns: {_median_us(lambda: resolver.effective(settings, 1, principal)) * 1000:.0f} ns")


# The slow engine: a CPU model's pace. Each answer is ANSWER_TOKENS long, so one sentence-released
# answer shows after ANSWER_TOKENS / TOKENS_PER_SECOND seconds.
TOKENS_PER_SECOND = 5
ANSWER_TOKENS = 6
TTFT_ROUNDS = 9


def _first_word_ms(client) -> float:
    """Milliseconds from sending a streamed chat request to the first event with words in it."""
    started = time.perf_counter()
    stream = client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "Say something."}],
                                            stream=True)
    try:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                return (time.perf_counter() - started) * 1000
    finally:
        stream.close()  # the rest of a slow answer is not what is measured
    raise RuntimeError("a streamed answer came back with no words in it")


def first_words() -> None:
    """guard_ttft_*: the first visible word of a slow model's answer with no policy, the baseline, and
    the baseline held back a sentence at a time."""
    import openai

    from llmgw.benchmark.overhead import Rig
    from llmgw.control.adminclient import AdminClient

    rig = Rig.start(answer_tokens=ANSWER_TOKENS, pin=False, sim_flags=("--tokens-per-second", str(TOKENS_PER_SECOND)))
    try:
        admin = AdminClient(rig.admin, f"{rig.tmp}/admin-token")
        admin.call("POST", "/api/v1/config", {"set": {"guard.policies.wide": json.dumps(
            {"output": {"deny": [{"name": "plans", "regex": "plan .* later", "action": "redact"}]}})}})
        client = openai.OpenAI(api_key=rig.key, base_url=rig.gateway_url + "/v1", max_retries=0)
        times: dict[str, list[float]] = {"none": [], "baseline": [], "sentence": []}
        _first_word_ms(client)  # the first request's connections and caches are not what is measured
        for _ in range(TTFT_ROUNDS):
            for name, policies in (("none", []), ("baseline", ["baseline"]), ("sentence", ["baseline", "wide"])):
                rig.guard_default(policies)
                times[name].append(_first_word_ms(client))
        rig.guard_default([])
    finally:
        rig.stop()
    none, baseline = statistics.median(times["none"]), statistics.median(times["baseline"])
    print(f"guard_ttft_none_ms: {none:.1f} ms (sim-engine at {TOKENS_PER_SECOND} tokens/s, {rig.placement})")
    print(f"guard_ttft_baseline_ms: {baseline:.1f} ms")
    print(f"guard_ttft_added_ms: {baseline - none:.1f} ms (target: within 50 ms)")
    print(f"guard_ttft_sentence_ms: {statistics.median(times['sentence']):.1f} ms "
          f"(a {ANSWER_TOKENS}-token answer released a sentence at a time)")


if __name__ == "__main__":
    main()
    first_words()
