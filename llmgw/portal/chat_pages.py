"""The chat page: a person talks to the models their project may use, through /v1, from the browser.

The page carries the session's chat credential in a data- attribute; chat.js
sends it to /v1/chat/completions with the chosen project in x-llmgw-project,
so every request is limited, budgeted, guarded and counted as a key's
(account/chattokens.py). Conversations stay in the browser's localStorage:
no prompt or answer is kept on the server (docs/portal.md, "Chat").
"""

from __future__ import annotations

from aiohttp import web

from llmgw.errors import N_
from llmgw.portal import i18n
from llmgw.portal.member import places_of
from llmgw.portal.web import PORTAL, Viewer, add_nav, page, render
from llmgw.store import ProjectPath

add_nav("main", "/chat", N_("Chat"), "member")

# What chat.js shows for each refusal code of /v1 (docs/client-api.md, "Refusals"), in the reader's
# language. {rule} is the guardrail rule's name; {detail} is the gateway's own sentence, in English.
ERRORS = {
    "guardrail_blocked": N_("A guardrail stopped this message (rule {rule}). Take out what the rule is about "
                            "and send it again."),
    "content_filter": N_("A guardrail stopped this answer part way; what came before is shown."),
    "budget_exceeded": N_("This project's budget is spent for now. Choose another project, or ask an "
                          "administrator to raise the budget."),
    "rate_limited": N_("Too many requests in this project just now. Wait a minute, then send again."),
    "replicas_failing": N_("Every copy of this model is failing just now. Try again in a minute, or choose "
                           "another model."),
    "no_capacity": N_("This model is busy. Try again in a moment."),
    "queue_timeout": N_("This model is busy and the message waited too long. Try again in a moment."),
    "upstream_timeout": N_("The model took too long to answer. Try again, or choose another model."),
    "upstream_failed": N_("The model failed to answer. Try again, or choose another model."),
    "upstream_cut": N_("The answer was cut off by the model. Send again to get a whole one."),
    "model_not_loaded": N_("This model could not be loaded just now. Try again later, or choose another model."),
    "model_stopped": N_("An administrator stopped this model. Choose another one."),
    "model_not_allowed": N_("This project may not use this model. Choose another one."),
    "model_not_found": N_("This model is not here any more. Reload the page to see the models there are."),
    "forbidden": N_("You are not a member of this project any more. Reload the page."),
    "invalid_api_key": N_("Your session has ended. Reload the page, signing in again if asked."),
    "too_many_unknown_keys": N_("Your session has ended. Reload the page, signing in again if asked."),
    "store_unavailable": N_("The gateway cannot check your session just now. Try again in a few seconds."),
    "guardrail_unavailable": N_("A guardrail could not check this message just now. Try again in a moment."),
    "engine_refused": N_("The model refused this message: {detail}"),
    "max_tokens_too_large": N_("The message asks for a longer answer than this model gives: {detail}"),
    "request_too_large": N_("This conversation is too long to send. Start a new conversation."),
    "no_leader": N_("The gateway has no leader just now. Try again in a minute."),
    "leader_unreachable": N_("The gateway has no leader just now. Try again in a minute."),
    "network": N_("The gateway could not be reached. Check your connection and send again."),
    "storage": N_("This browser would not keep the conversation; it will be lost when the page closes."),
    "other": N_("The gateway could not answer this message: {detail}"),
}

LABELS = {
    "you": N_("You"),
    "assistant": N_("Assistant"),
    "stopped": N_("Stopped before the answer was finished."),
    "copy": N_("Copy"),
    "copied": N_("Copied"),
    "sources": N_("Sources: {files}"),
    "untitled": N_("New conversation"),
    "delete-confirm": N_("Delete this conversation? It is kept only in this browser, so it cannot be brought "
                         "back."),
}


def chosen_project(projects: list[ProjectPath], wanted: str) -> ProjectPath | None:
    """The project asked for (by id or path) when it is the person's, else their first (as /v1 chooses)."""
    for path in projects:
        if wanted and wanted in (path.project.id, str(path)):
            return path
    return projects[0] if projects else None


@page("/chat")
async def chat(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None  # not a public page: the frame sends the signed-out to /signin
    portal = request.app[PORTAL]
    projects = await portal.people.projects_of(viewer.person.id)
    chosen = chosen_project(projects, request.query.get("project", ""))
    models: list[str] = []
    bases: list[dict[str, str]] = []
    if chosen is not None:
        bases = await portal.knowledge.readable_names(places_of(chosen))
        principal = await portal.plane.chat.lookup(viewer.chat_token, chosen.project.id)
        if principal is not None:
            registry = portal.plane.router.registry.models
            models = sorted(name for name, entry in registry.items()
                            if "chat" in entry.settings.can and principal.limits.allows_model(name))
    lang = viewer.lang
    return render(
        request, "chat.html", title=N_("Chat"), projects=projects, chosen=chosen, models=models, bases=bases,
        chat_token=viewer.chat_token,
        errors={code.replace("_", "-"): i18n.gettext(lang, sentence) for code, sentence in ERRORS.items()},
        labels={name: i18n.gettext(lang, sentence) for name, sentence in LABELS.items()},
    )
