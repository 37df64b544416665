"""The client API: /v1 in OpenAI's and Anthropic's shapes, and the health endpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.lazyface import lazy_face

if TYPE_CHECKING:
    from llmgw.router.apis import IMAGES
    from llmgw.router.app import CONNECTIONS, make_client_app
    from llmgw.router.batches import BatchRunner, FileKeeper
    from llmgw.router.call import Refuse, new_request_id
    from llmgw.router.clientaddr import client_address, proxies
    from llmgw.router.connguard import GuardedSite
    from llmgw.router.endpoint import Endpoint
    from llmgw.router.errors import speaks_anthropic
    from llmgw.router.handlers import Inside, serve
    from llmgw.router.media.jobrunner import JobRunner
    from llmgw.router.media.jobs import run_object, submit, workflow_models
    from llmgw.router.plane import ClientPlane, KeyLookup, LiveSettings
    from llmgw.router.prompttokens import NoTokenizer, PromptTokens
    from llmgw.router.registry import Placed
    from llmgw.router.scheduler import register_profile, register_scorer
    from llmgw.router.scrape import read_once
    from llmgw.router.service import Router
    from llmgw.router.targets import TargetRefused, providers_session, refusing_socket

__all__ = [
    "NoTokenizer", "PromptTokens",
    "IMAGES", "BatchRunner", "CONNECTIONS", "FileKeeper", "Inside", "JobRunner", "Refuse", "new_request_id",
    "run_object", "serve", "submit", "workflow_models", "ClientPlane", "Endpoint", "GuardedSite", "KeyLookup",
    "LiveSettings",
    "Placed", "Router", "TargetRefused",
    "client_address", "make_client_app", "providers_session", "proxies", "read_once", "refusing_socket",
    "register_profile", "register_scorer", "speaks_anthropic",
]

# The face's names, each imported from its module when first asked for (llmgw/lazyface.py): importing
# the package costs nothing, and one name loads only its own module.
__getattr__ = lazy_face(__name__, {
    "app": ("CONNECTIONS", "make_client_app"),
    "apis": ("IMAGES",),
    "batches": ("BatchRunner", "FileKeeper"),
    "call": ("Refuse", "new_request_id"),
    "handlers": ("Inside", "serve"),
    "media.jobs": ("run_object", "submit", "workflow_models"),
    "clientaddr": ("client_address", "proxies"),
    "connguard": ("GuardedSite",),
    "endpoint": ("Endpoint",),
    "errors": ("speaks_anthropic",),
    "media.jobrunner": ("JobRunner",),
    "plane": ("ClientPlane", "KeyLookup", "LiveSettings"),
    "registry": ("Placed",),
    "scheduler": ("register_profile", "register_scorer"),
    "scrape": ("read_once",),
    "prompttokens": ("NoTokenizer", "PromptTokens"),
    "service": ("Router",),
    "targets": ("TargetRefused", "providers_session", "refusing_socket"),
})
