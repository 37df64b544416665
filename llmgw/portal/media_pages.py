"""The Images and Workflows pages: a person makes pictures and runs ComfyUI workflows through /v1, from the browser.

As on the chat page (chat_pages.py), the page carries the session's chat
credential in a data- attribute and its script calls /v1 with it, the
chosen project in x-llmgw-project, so each picture and run is limited,
budgeted, guarded and counted as a key's (account/chattokens.py). The server
writes the choosers and each workflow's form from the models' declared
inputs; the script sends, follows and shows. Recent pictures are thumbnails
in the browser's localStorage; runs and their outputs are the project's, on
the gateway, as any key's are (docs/portal.md, "Images", "Workflows").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from llmgw.account import Principal
from llmgw.errors import N_
from llmgw.portal import i18n
from llmgw.portal.chat_pages import ERRORS as CHAT_ERRORS
from llmgw.portal.chat_pages import chosen_project
from llmgw.portal.web import PORTAL, Viewer, add_nav, page, render
from llmgw.router import workflow_models
from llmgw.store import ProjectPath

add_nav("main", "/images", N_("Images"), "member")
add_nav("main", "/workflows", N_("Workflows"), "member")

# The sizes offered: squares and the two 4:3 shapes, within what the built-in workflow takes (64 to 2048).
SIZES = ("512x512", "768x768", "1024x1024", "1024x768", "768x1024")
DEFAULT_SIZE = "1024x1024"
KEEP_PICTURES = 12  # thumbnails kept in the browser; the oldest goes first
RECENT_RUNS = 10

# What media.js shows for each refusal code: the chat's sentences where they fit a picture as well as a message,
# and the media routes' own (docs/media.md). {detail} is the gateway's sentence, in English.
SHARED = ("budget_exceeded", "rate_limited", "replicas_failing", "no_capacity", "upstream_timeout", "upstream_failed",
          "model_not_loaded", "model_stopped", "model_not_allowed", "model_not_found", "forbidden", "invalid_api_key",
          "too_many_unknown_keys", "store_unavailable", "no_leader", "leader_unreachable", "network")
ERRORS = {
    **{code: CHAT_ERRORS[code] for code in SHARED},
    "guardrail_blocked": N_("A guardrail stopped this prompt (rule {rule}). Take out what the rule is about and try "
                            "again."),
    "guardrail_unavailable": N_("A guardrail could not check this prompt just now. Try again in a moment."),
    "queue_timeout": N_("This model is busy and the request waited too long. Try again in a moment."),
    "invalid_request": N_("The model cannot take these values: {detail}"),
    "unsupported_capability": N_("This model does not do this. Choose another one."),
    "workflow_unusable": N_("This model's workflow cannot be used just now: {detail}"),
    "too_many_runs": N_("This project has as many runs waiting as it may have. Wait for some to end, then try again."),
    "file_too_large": N_("This file is larger than the gateway takes: {detail}"),
    "file_not_found": N_("A file this run needs is not here any more: {detail}"),
    "run_not_found": N_("This run is not here any more; runs are deleted some days after they end."),
    "upstream_error": N_("The model failed: {detail}"),
    "workflow_failed": N_("The workflow failed on these values: {detail}"),
    "no_replica": N_("This model has nowhere to run just now. Try again in a moment."),
    "upstream_invalid": N_("The model answered with no picture: {detail}"),
    "storage": N_("This browser would not keep the picture among the recent ones; it is shown until the page "
                  "closes."),
    "other": N_("The gateway could not do this: {detail}"),
}

IMAGE_LABELS = {
    "seed": N_("Seed {seed}"),
    "licence": N_("Licence:"),
    "commercial-yes": N_("commercial use allowed"),
    "commercial-no": N_("not for commercial use"),
    "download": N_("Download"),
    "make": N_("Make"),
    "making": N_("Making…"),
    "no-picture": N_("The answer had no picture in it."),
    "elsewhere": N_("The picture is at the provider's address:"),
    "forget-confirm": N_("Forget the recent pictures? They are kept only in this browser."),
}

WORKFLOW_LABELS = {
    "run": N_("Run"),
    "running": N_("Running…"),
    "queued": N_("queued"),
    "status-running": N_("running"),
    "succeeded": N_("succeeded"),
    "failed": N_("failed"),
    "cancelled": N_("cancelled"),
    "waiting": N_("Waiting for a free replica…"),
    "steps": N_("Current node: {value} of {max}"),
    "nodes": N_("Nodes done: {done} of {total}"),
    "show": N_("Show"),
    "no-runs": N_("No runs in this project yet."),
    "no-outputs": N_("The run ended and made nothing."),
    "random": N_("random"),
}


MAKES = {"pictures": N_("It makes pictures."), "meshes": N_("It makes 3D meshes."), "files": N_("It makes files.")}


def web_link(url: str) -> str:
    """`url` when it is an http(s) address, else "": a licence's address is the catalog's text, shown as a link."""
    return url if url.startswith(("https://", "http://")) else ""


@dataclass
class _Place:
    """The project a media page is in, the person's projects, and what the chat credential may do there."""

    projects: list[ProjectPath]
    chosen: ProjectPath | None
    principal: Principal | None


async def _place(request: web.Request, viewer: Viewer) -> _Place:
    portal = request.app[PORTAL]
    projects = await portal.people.projects_of(viewer.person.id)
    chosen = chosen_project(projects, request.query.get("project", ""))
    principal = None
    if chosen is not None:
        principal = await portal.plane.chat.lookup(viewer.chat_token, chosen.project.id)
    return _Place(projects, chosen, principal)


def _sentences(lang: str, sentences: dict[str, str]) -> dict[str, str]:
    """data- attribute names (dashes) to sentences in the reader's language."""
    return {code.replace("_", "-"): i18n.gettext(lang, sentence) for code, sentence in sentences.items()}


@page("/images")
async def images(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None  # not a public page: the frame sends the signed-out to /signin
    place = await _place(request, viewer)
    models: list[str] = []
    if place.principal is not None:
        allows = place.principal.limits.allows_model
        registry = request.app[PORTAL].plane.router.registry.models
        models = sorted(name for name, entry in registry.items() if "images" in entry.settings.can and allows(name))
    return render(
        request, "images.html", title=N_("Images"), projects=place.projects, chosen=place.chosen, models=models,
        sizes=SIZES, default_size=DEFAULT_SIZE, keep=KEEP_PICTURES, chat_token=viewer.chat_token,
        errors=_sentences(viewer.lang, ERRORS), labels=_sentences(viewer.lang, IMAGE_LABELS),
    )


@dataclass
class Field:
    """One declared input of a workflow as its form shows it."""

    name: str
    type: str
    required: bool
    description: str
    default: Any
    choices: list[str]
    min: float | None
    max: float | None

    @property
    def control(self) -> str:
        """Which control the template writes: textarea, number, checkbox, select or file."""
        return {"text": "textarea", "integer": "number", "number": "number", "seed": "number", "boolean": "checkbox",
                "choice": "select", "image": "file", "mask": "file", "file": "file"}.get(self.type, "textarea")

    @property
    def step(self) -> str:
        return "any" if self.type == "number" else "1"

    @property
    def accept(self) -> str:
        return "image/*" if self.type in ("image", "mask") else ""

    @property
    def value(self) -> str:
        """The default as the control's value; "" for none (a seed's none is a random one)."""
        if self.default is None or isinstance(self.default, bool):
            return ""
        return str(self.default)


def fields_of(inputs: dict[str, dict[str, Any]]) -> list[Field]:
    """The form's fields in the order the page shows them: what must be given first, then the rest as declared."""
    made = [Field(name, doc.get("type", "text"), bool(doc.get("required")), str(doc.get("description", "")),
                  doc.get("default"), list(doc.get("choices", [])), doc.get("min"), doc.get("max"))
            for name, doc in inputs.items()]
    return sorted(made, key=lambda f: not f.required)


@page("/workflows")
async def workflows(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    place = await _place(request, viewer)
    models: list[dict[str, Any]] = []
    if place.principal is not None:
        models = workflow_models(request.app[PORTAL].plane, place.principal)
    for model in models:
        model["fields"] = fields_of(model["inputs"])
        model["makes"] = MAKES.get(model["output"], MAKES["files"])
        model["built_in"] = not str(model["workflow"]).startswith("/")  # a file's path is the operators' business
        licence = model.get("license") or {}
        model["licence"] = {"label": licence.get("name") or licence.get("id") or licence.get("url") or "",
                            "link": web_link(str(licence.get("url", ""))), "commercial": licence.get("commercial")}
    wanted = request.query.get("model", "")
    shown = next((m["model"] for m in models if m["model"] == wanted), models[0]["model"] if models else "")
    return render(
        request, "workflows.html", title=N_("Workflows"), projects=place.projects, chosen=place.chosen,
        models=models, shown=shown, recent=RECENT_RUNS, chat_token=viewer.chat_token,
        errors=_sentences(viewer.lang, ERRORS), labels=_sentences(viewer.lang, WORKFLOW_LABELS),
    )
