"""What a webhook is sent for an event: the event as JSON, or Slack's {"text": …}.

The JSON is `{"id", "kind", "subject", "at", "held_back", …the event's
fields}`: names, ids and counts, never a prompt, an answer or a secret (the
bus refuses those, llmgw/events.py). Slack's text is one line a person reads
in a channel, the same facts in words.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmgw.events import Event

_SAY = {
    "budget_80": "{level_name} has spent {spent} of its {budget} for the {period} (80 %)",
    "budget_100": "{level_name} has spent all of its {budget} for the {period}: its requests are refused until "
                  "the {period} ends",
    "key_revoked": "the API key {key_name} ({key_id}) of {project} was revoked by {by}",
    "key_expired": "the API key {key_name} ({key_id}) of {project} has expired and was used",
    "node_lost": "node {node} has not been heard from for {away_s} s; its replicas are placed elsewhere",
    "replica_failed": "replica {replica} of {model} on node {node_id} failed: {reason}",
    "guardrail_blocked": "the guardrails ({policies}) blocked a request of {project}: {rules}",
    "external_key_refused": "an outside provider refused its key at {subject}",
    "leader_changed": "{leader} now leads the cluster",
    "judge_unavailable": "the guardrails' judge {subject} did not answer",
    "service_unavailable": "the guardrail service {subject} did not answer",
    "test": "a test from llmgw: this webhook is reached",
}


def event_doc(event: Event, delivery_id: str) -> dict[str, Any]:
    return {"id": delivery_id, **event.to_dict()}


def render(doc: dict[str, Any], format: str) -> bytes:
    """The body sent for `doc` (event_doc's) to a webhook of `format`."""
    if format == "slack":
        return orjson.dumps({"text": sentence(doc)})
    return orjson.dumps(doc)


def sentence(doc: dict[str, Any]) -> str:
    template = _SAY.get(doc["kind"], "{kind} about {subject}")
    values = {k: ", ".join(map(str, v)) if isinstance(v, list) else v for k, v in doc.items()}
    try:
        text = template.format(**values)
    except (KeyError, IndexError, ValueError):
        text = f"{doc['kind']} about {doc.get('subject') or '-'}"
    held = doc.get("held_back") or 0
    more = f" ({held} more like it this past hour)" if held else ""
    return f"llmgw: {text}{more}"
