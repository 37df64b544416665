"""`llmgw server`: the control plane, its admin API and its client, the catalog, the workers (docs/internals.md).

This is its face: the names other packages use, imported from here rather
than from the module inside that defines them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.lazyface import lazy_face

if TYPE_CHECKING:
    from llmgw.control.adminapi import Refused, status_of
    from llmgw.control.adminapi.logs import node_logs_of
    from llmgw.control.adminapi.models import catalog_of
    from llmgw.control.adminclient import AdminClient, AdminError, token_file
    from llmgw.control.catalog.changes import Refusal
    from llmgw.control.catalog.explain import action_line
    from llmgw.control.catalog.placement import GONE
    from llmgw.control.catalog.service import Catalog
    from llmgw.control.catalog.spec import ROLE_LABEL, SpecError, parse_spec_text
    from llmgw.control.engineloads import engine_figures
    from llmgw.control.exports import send_export
    from llmgw.control.plane import ControlPlane, serve
    from llmgw.control.plugins import load_server_plugins
    from llmgw.control.settings import (
        ClusterSettingsWatcher,
        SettingsError,
        seed_settings,
        seeded_settings,
        validated_change,
    )
    from llmgw.control.signin import KINDS, SignInSetup
    from llmgw.control.token import DEFAULT_HOLDER, ensure_token, read_token
    from llmgw.control.workers import WorkerFailed, run_worker
    from llmgw.control.workers.worker import Worker

__all__ = [
    "AdminClient", "AdminError", "Catalog", "ClusterSettingsWatcher",
    "ControlPlane", "DEFAULT_HOLDER", "GONE", "KINDS", "ROLE_LABEL", "Refusal", "Refused",
    "SettingsError", "SignInSetup", "SpecError", "Worker", "WorkerFailed", "action_line", "catalog_of",
    "engine_figures", "ensure_token", "load_server_plugins", "node_logs_of", "parse_spec_text", "read_token",
    "run_worker",
    "seed_settings", "seeded_settings", "send_export", "serve", "status_of", "token_file", "validated_change",
]

# The face's names, each imported from its module when first asked for (llmgw/lazyface.py): importing
# the package costs nothing, and one name loads only its own module.
__getattr__ = lazy_face(__name__, {
    "adminapi": ("Refused", "status_of"),
    "adminapi.logs": ("node_logs_of",),
    "adminapi.models": ("catalog_of",),
    "adminclient": ("AdminClient", "AdminError", "token_file"),
    "catalog.changes": ("Refusal",),
    "catalog.explain": ("action_line",),
    "catalog.placement": ("GONE",),
    "catalog.service": ("Catalog",),
    "catalog.spec": ("ROLE_LABEL", "SpecError", "parse_spec_text"),
    "engineloads": ("engine_figures",),
    "exports": ("send_export",),
    "plane": ("ControlPlane", "serve"),
    "plugins": ("load_server_plugins",),
    "settings": ("ClusterSettingsWatcher", "SettingsError", "seed_settings", "seeded_settings", "validated_change"),
    "signin": ("KINDS", "SignInSetup"),
    "token": ("DEFAULT_HOLDER", "ensure_token", "read_token"),
    "workers": ("WorkerFailed", "run_worker"),
    "workers.worker": ("Worker",),
})
