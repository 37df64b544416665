"""/admin/models: the catalog's models, their state and replicas, and the forms that change them.

Every form calls control.catalog.Catalog, the service behind the admin
API's /api/v1/models, acting as the viewer through the portal, so a change
made here is the same change `llmgw ctl model …` makes and is audited as
(e-mail, portal). A refusal is the catalog's own sentence, in the reader's
language, on the page again with what was typed kept.
"""

from __future__ import annotations

from typing import Any

import yaml
from aiohttp import web
from multidict import MultiDictProxy

from llmgw.control import Refusal
from llmgw.errors import N_
from llmgw.portal import i18n
from llmgw.portal.web import LANG, PORTAL, Viewer, add_nav, form, page, redirect, render

add_nav("admin", "/admin/models", N_("Models"), "operator")

TITLE = N_("Models")
SERVE_FIELDS = ("source", "name", "engine", "gpus", "context", "min", "trust", "layout")
# Why the explorer left a repository out (control/catalog/explorer.py), as a person reads it.
LEFT_OUT = {"too big": N_("too big for any node"), "fp8": N_("FP8 without a card of compute capability 8.9"),
            "mlx": N_("MLX"), "no weights": N_("neither GGUF nor safetensors"), "pickle only": N_("pickle only"),
            "no cards": N_("safetensors alone, and no node has cards")}
# The catalog's states (Catalog.model_view) and replicas' (store.records.Replica), as a person reads them.
STATES = {
    "ready": N_("ready"), "starting": N_("starting"), "stopped": N_("stopped"), "parked": N_("parked"),
    "on demand": N_("on demand"), "waiting": N_("waiting for room"), "removing": N_("being removed"),
    "pending": N_("pending"), "draining": N_("draining"), "failed": N_("failed"), "lost": N_("lost"),
    "unreadable": N_("unreadable"),
}


class FormError(Exception):
    """A field of a form that cannot be sent to the catalog: an N_() msgid and its params."""

    def __init__(self, template: str, **params: object):
        super().__init__(template)
        self.template, self.params = template, params


def whole_number(posted: MultiDictProxy[str], name: str, label: str) -> int | None:
    """A form's field as a whole number, or None when left empty."""
    text = (posted.get(name) or "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise FormError(N_("{field} must be a whole number, such as 2; it was “{value}”."),
                        field=label, value=text[:40]) from None


def _wake_leader(request: web.Request) -> None:
    # As the admin API does after a catalog change: the leader's next pass
    # now, so the routers know a new model (503 until it has a replica)
    # before anyone asks for it. Elsewhere (a standby, a worker) the leader
    # sees the new version on its own within its pass.
    cluster = getattr(request.app[PORTAL].plane, "cluster", None)
    if cluster is not None:
        cluster.agents.changed.set()


async def _page(request: web.Request, viewer: Viewer, *, status: int = 200, error: str | None = None,
                typed: dict[str, str] | None = None, spec_text: str = "", query: str = "",
                found: dict[str, Any] | None = None) -> web.Response:
    catalog = request.app[PORTAL].catalog()
    models = await catalog.list_models()
    replicas = await catalog.replicas()
    by_model: dict[str, list[dict[str, Any]]] = {}
    for r in replicas:
        by_model.setdefault(r["model"], []).append(r)
    return render(request, "admin/models.html", status=status, title=TITLE, models=models, replicas=by_model,
                  states=STATES, error=error, typed=typed or {}, spec_text=spec_text, query=query, found=found,
                  left_out=LEFT_OUT)


def _refused(request: web.Request, e: Refusal | FormError) -> str:
    lang = request[LANG]
    if isinstance(e, FormError):
        return i18n.gettext(lang, e.template).format(**e.params)
    return i18n.say(lang, e)


def _saved(request: web.Request, name: str) -> web.HTTPSeeOther:
    _wake_leader(request)
    notice = i18n.gettext(request[LANG], N_("The change to {model} is saved; the cluster carries it out "
                                            "within seconds.")).format(model=name)
    return redirect(request, "/admin/models", notice=notice)


def _vouched(posted: MultiDictProxy[str], viewer: Viewer) -> bool:
    """An administrator's word for a publisher outside hub.trusted_publishers; an operator's box is not offered,
    and one posted anyway is refused rather than taken as nothing."""
    if posted.get("trust") != "1":
        return False
    if not viewer.may("admin"):
        raise FormError(N_("Only an administrator may vouch for a publisher outside the trusted publishers."))
    return True


@page("/admin/models", role="operator")
async def models(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    query = request.query.get("q", "").strip()
    if not query:
        return await _page(request, viewer)
    try:
        found = await request.app[PORTAL].catalog().explore(query[:200])
    except Refusal as e:
        return await _page(request, viewer, status=e.status, error=_refused(request, e), query=query)
    return await _page(request, viewer, query=query, found=found)


@page("/admin/models/plan", role="operator")
async def model_plan(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    """The plan of one model on the hub (what `llmgw ctl model plan` says), each way offered with its own Serve."""
    assert viewer is not None
    source = request.query.get("source", "").strip()
    context = request.query.get("context", "").strip()
    try:
        if not source:
            raise FormError(N_("Say which model to plan, such as hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-"
                               "instruct-q4_k_m.gguf."))
        if context and not context.isdigit():
            raise FormError(N_("{field} must be a whole number, such as 2; it was “{value}”."),
                            field=i18n.gettext(request[LANG], N_("Context")), value=context[:40])
        planned = await request.app[PORTAL].catalog().plan(source, int(context or 0))
    except (Refusal, FormError) as e:
        return await _page(request, viewer, status=getattr(e, "status", 400), error=_refused(request, e))
    return render(request, "admin/model_plan.html", title=TITLE, planned=planned, source=source)


@page("/admin/models/serve", methods=("POST",), role="operator")
async def serve(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    posted = await form(request)
    typed = {k: posted.get(k, "") for k in SERVE_FIELDS}
    try:
        source = typed["source"].strip()
        if not source:
            raise FormError(N_("Say where the weights come from, such as hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF."))
        lang = request[LANG]
        least = whole_number(posted, "min", i18n.gettext(lang, N_("Replicas")))
        result = await request.app[PORTAL].catalog().serve(
            viewer.actor(), source, name=typed["name"].strip() or None, engine=typed["engine"].strip() or None,
            gpus=whole_number(posted, "gpus", i18n.gettext(lang, N_("Cards"))),
            context=whole_number(posted, "context", i18n.gettext(lang, N_("Context"))),
            min_=1 if least is None else least,  # as the admin API: one replica unless told
            trust=_vouched(posted, viewer), layout=whole_number(posted, "layout", i18n.gettext(lang, N_("Way"))))
    except (Refusal, FormError) as e:
        return await _page(request, viewer, status=getattr(e, "status", 400), error=_refused(request, e),
                           typed=typed)
    return _saved(request, result["model"]["name"])


@page("/admin/models/add", methods=("POST",), role="operator")
async def add(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    posted = await form(request)
    text = posted.get("spec", "")
    try:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            raise FormError(N_("The model file is not YAML or JSON (line {line}): fix it and add it again."),
                            line=mark.line + 1 if mark is not None else 1) from None
        if not isinstance(doc, dict):
            raise FormError(N_("The model file must be a mapping of fields, as llmgw ctl model add -f takes."))
        result = await request.app[PORTAL].catalog().add(viewer.actor(), doc, trust=_vouched(posted, viewer))
    except (Refusal, FormError) as e:
        return await _page(request, viewer, status=getattr(e, "status", 400), error=_refused(request, e),
                           spec_text=text)
    return _saved(request, result["model"]["name"])


@page("/admin/models/{name}/scale", methods=("POST",), role="operator")
async def scale(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    name = request.match_info["name"]
    posted = await form(request)
    lang = request[LANG]
    try:
        await request.app[PORTAL].catalog().scale(
            viewer.actor(), name, whole_number(posted, "min", i18n.gettext(lang, N_("At least"))),
            whole_number(posted, "max", i18n.gettext(lang, N_("At most"))))
    except (Refusal, FormError) as e:
        return await _page(request, viewer, status=getattr(e, "status", 400), error=_refused(request, e))
    return _saved(request, name)


@page("/admin/models/{name}/stop", methods=("POST",), role="operator")
async def stop(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    name = request.match_info["name"]
    try:
        await request.app[PORTAL].catalog().stop(viewer.actor(), name)
    except Refusal as e:
        return await _page(request, viewer, status=e.status, error=_refused(request, e))
    return _saved(request, name)


@page("/admin/models/{name}/start", methods=("POST",), role="operator")
async def start(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    name = request.match_info["name"]
    try:
        await request.app[PORTAL].catalog().start(viewer.actor(), name)
    except Refusal as e:
        return await _page(request, viewer, status=e.status, error=_refused(request, e))
    return _saved(request, name)
