"""A run of a ComfyUI model's workflow, as the job runner sends it through the router (router/media/jobs.py).

It has no client route of its own: a client makes a job (POST
/v1/workflows/runs) and the leader's runner sends each job through
handlers.serve as an inside request, so a run meets the key's limits,
budgets and guardrails and leaves one usage row, as any request does.

The engine's body is {"model", "inputs", "files"}: the values a person
typed under `inputs`, which the input guardrails read (text values as a
user's turn), and the file inputs apart under `files`, which no rule reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.config import FILE_TYPES
from llmgw.router.apis.base import Prepared, Shape
from llmgw.router.call import Refuse
from llmgw.router.wire import JSON

if TYPE_CHECKING:
    from llmgw.router.registry import ModelEntry


class Workflows(Shape):
    api = "workflows"
    route = ""  # runs are made as jobs, never answered on a route of their own
    upstream_path = ""
    engine_api = "workflows"
    operation = "generate_content"
    answers_text = False
    cached = False
    conversational = False

    def prepare(self, body: JSON, *, model: str, entry: ModelEntry) -> Prepared:
        from llmgw.router.media.runs import workflow_of

        inputs = body.get("inputs", {})
        if not isinstance(inputs, dict):
            raise Refuse(400, '"inputs" must be an object of the workflow\'s inputs by name', "invalid_request",
                         param="inputs")
        if entry.settings.comfyui is None:
            raise Refuse(400, f"{model} runs no workflow; GET /v1/workflows lists the models that do",
                         "unsupported_capability", param="model")
        flow = workflow_of(entry)
        files = {k: v for k, v in inputs.items() if k in flow.inputs and flow.inputs[k].type in FILE_TYPES}
        typed = {k: v for k, v in inputs.items() if k not in files}
        return Prepared({"model": model, "inputs": typed, "files": files}, False, False)

    def replay_stream(self, answer: bytes, *, model: str, request: JSON, include_usage: bool) -> bytes:
        raise ValueError("workflow runs are never streamed")


WORKFLOWS = Workflows()
