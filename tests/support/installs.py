"""Ending an install a test made under a root: its model stopped, then everything else it started, by their PIDs.

The agent's unit has KillMode=process (engines outlive an agent that
restarts), so stopping the agent alone would leave its engines running:
the model is stopped first, the orderly way, and then the rest as `llmgw
stop` does it, which also ends an engine the orderly way could not reach
(a test that failed with its control plane already stopped).
"""

from __future__ import annotations

from pathlib import Path

from llmgw.control.adminclient import AdminClient, AdminError
from llmgw.onboard.layout import Layout
from llmgw.onboard.services import service_manager
from llmgw.onboard.stopping import stop_install
from tests.support.waiting import wait_until


def end_install(root: Path, admin: str, token_file: Path, models: tuple[str, ...] = ("sim", "judge-sim")) -> None:
    layout = Layout(root)
    manager = service_manager(layout, "supervised")
    try:
        if token_file.exists() and manager.status("llmgw-server.service").active:
            client = AdminClient(admin, str(token_file), timeout=10)
            for model in models:
                try:
                    client.call("POST", f"/api/v1/models/{model}/stop", {})
                except AdminError:
                    continue  # not in the catalog: nothing of it runs
                wait_until(lambda m=model: all(r.get("state") in ("stopped", "failed") for r in
                                               client.call("GET", "/api/v1/replicas", query={"model": m})),
                           60, f"{model}'s replicas stopped")
    finally:
        stop_install(layout, manager)
