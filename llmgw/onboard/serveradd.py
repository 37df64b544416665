"""`llmgw server add --ssh`: a standby control plane installed from this one, over SSH.

A standby shares this control plane's PostgreSQL store and its master key
(docs/ha.md): both travel on the SSH channel's stdin to `llmgw onboard
server` there. A SQLite store is one machine's file, so it is refused with
what to do instead. The install ends when the standby answers /health.
"""

from __future__ import annotations

import asyncio
import base64
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmgw.config import Address
from llmgw.onboard.layout import Layout
from llmgw.onboard.nodeadd import NodeAdd, prepare, run_there
from llmgw.onboard.standby import ServerPlan
from llmgw.onboard.steps import Progress, StepFailed

STEP_SHARED = "read this control plane's store and master key"
STEP_WAIT = "wait for the standby to answer"


@dataclass
class ServerAdd(NodeAdd):
    store: str = field(default="", repr=False)
    master_key: bytes = field(default=b"", repr=False)
    listen: dict[str, str] = field(default_factory=dict)
    vip: str = ""
    vip_interface: str | None = None
    mirror: dict[str, Any] = field(default_factory=dict)  # ServerPlan's: a mirror installed beside the standby


def shared_parts(store: str, data_dir: str) -> bytes:
    """This control plane's master key, after checking that its store can be shared at all."""
    from llmgw.config import MASTER_KEY_FILE

    if not store.startswith(("postgresql://", "postgres://")):
        raise StepFailed(STEP_SHARED, f"this control plane's store is {store or 'SQLite in its data directory'}, a "
                                      "file only this machine can open; a standby needs the store in PostgreSQL "
                                      "(docs/store.md says how to move to it), then run again")
    path = Path(data_dir) / MASTER_KEY_FILE
    try:
        return path.read_bytes()
    except OSError as e:
        raise StepFailed(STEP_SHARED, f"the master key at {path} cannot be read ({e.strerror}); run this as root "
                                      "on a control plane of the cluster") from None


async def add_server(job: ServerAdd, report: Callable[[Progress], None]) -> dict[str, Any]:
    host = job.target.host
    layout = Layout(Path(job.root))
    session, machine = await prepare(job, layout, report, report)
    try:
        plan = ServerPlan(machine=host, store=job.store, master_key=base64.b64encode(job.master_key).decode(),
                          name=job.name, listen=job.listen, services=job.services,
                          program_changed=machine["copied"], vip=job.vip, vip_interface=job.vip_interface,
                          mirror=job.mirror)
        server = await run_there(session, job, layout, "server", asdict(plan), report)
    finally:
        session.close()
    client = Address(job.listen.get("client") or ":8080")
    url = f"http://{host if client.host in ('', '0.0.0.0', '::') else client.host}:{client.port}/health"  # noqa: S104
    await wait_healthy(url, host, job.wait, report)
    server["health"] = url
    return server


async def wait_healthy(url: str, host: str, wait: float, report: Callable[[Progress], None]) -> None:
    def healthy() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - the http:// URL built above
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    report(Progress(host, STEP_WAIT, "doing", url))
    deadline = time.monotonic() + wait
    while not await asyncio.to_thread(healthy):
        if time.monotonic() >= deadline:
            raise StepFailed(STEP_WAIT, f"the standby on {host} was installed but {url} has not answered in "
                                        f"{wait:g} s; see its log there (journalctl -u llmgw-server, or "
                                        "var/log/llmgw/llmgw-server.service.log under the install's root)")
        await asyncio.sleep(0.5)
    report(Progress(host, STEP_WAIT, "done", url))
