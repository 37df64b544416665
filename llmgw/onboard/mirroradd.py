"""`llmgw mirror add-peer USER@HOST`: a second model mirror on a machine of its own, installed over SSH.

Run as root where a mirror and a control plane run. On the other machine, as `llmgw node add --ssh` does: log in,
check its Python, copy the program; then `llmgw onboard mirror-key` there makes the mirror's key (it never leaves
that machine) and answers a certificate request, which this control plane's CA signs through the admin API
(`POST /api/v1/mirrors/certificate`, audited); `llmgw onboard mirror` writes the certificate, mirror.yaml naming
this mirror as its peer, and starts llmgw-mirror.service. Back here: wait for it to answer, name it in this
mirror's mirror.yaml (the mirror reads the file again by itself) and in the cluster's `mirror.peers`.

Every step is reported as Progress and says "unchanged" when there was nothing to do: a second run changes nothing.
A certificate is signed again only when the one there is not this CA's, not for this key or these addresses, or
runs out within a month.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from llmgw.files import write_atomic
from llmgw.onboard.defaults import MIRROR_DIR, MIRROR_LISTEN
from llmgw.onboard.layout import Layout
from llmgw.onboard.nodeadd import Admin, NodeAdd, prepare, run_there
from llmgw.onboard.peermirror import KeyPlan, MirrorPlan
from llmgw.onboard.steps import Progress, StepFailed

STEP_THIS = "read this mirror's mirror.yaml"
STEP_SIGN = "sign the mirror's certificate"
STEP_WAIT = "wait for the mirror to answer"
STEP_PEERS = "name it in this mirror's peers"
STEP_CLUSTER = "name it in the cluster's mirror.peers"


@dataclass
class MirrorAdd(NodeAdd):
    listen: str = MIRROR_LISTEN  # where the new mirror listens, on its machine
    folder: str = MIRROR_DIR  # where it keeps its files
    config: str = "/etc/llmgw/mirror.yaml"  # this machine's mirror's mirror.yaml
    url: str = ""  # this mirror's address as the other machine reaches it; default from its listen


def mirror_name(job: MirrorAdd) -> str:
    """--name, else the host it was reached at, in the characters a name may hold."""
    if job.name:
        return job.name
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in job.target.host).strip("-._") or "mirror"


def this_mirror(job: MirrorAdd) -> tuple[Any, str]:
    """This machine's mirror.yaml, and the address the other mirror reads this one at."""
    from llmgw.config import ConfigError, load_mirror_config
    from llmgw.onboard.mirrorpart import url_for

    if not Path(job.config).exists():
        raise StepFailed(STEP_THIS, f"there is no mirror here: {job.config} does not exist; run add-peer on the "
                                    "machine whose mirror the new one is to keep in step with, or give --config")
    try:
        cfg = load_mirror_config(job.config)
    except ConfigError as e:
        raise StepFailed(STEP_THIS, f"{job.config}: {e}; fix it, then run again") from None
    return cfg, (job.url or url_for(str(cfg.listen))).rstrip("/")


async def add_peer(job: MirrorAdd, admin: Admin, report: Callable[[Progress], None]) -> dict[str, Any]:
    """Every step of installing the peer mirror; its name and address once it answers."""
    from llmgw.onboard.mirrorpart import url_for

    host = job.target.host
    layout = Layout(Path(job.root))
    cfg, this_url = this_mirror(job)
    peer_url = url_for(job.listen, host).rstrip("/")
    name = mirror_name(job)
    session, machine = await prepare(job, layout, report, report)
    try:
        key = await run_there(session, job, layout, "mirror-key", asdict(KeyPlan(host, name)), report)
        hosts = list(dict.fromkeys([host, *key["hosts"]]))
        certificate, ca = await sign(admin, key, name, hosts, host, report, cluster_ca(cfg))
        default_hub = type(cfg)().hub_endpoint
        plan = MirrorPlan(machine=host, certificate=certificate, ca=ca, peers=[this_url], listen=job.listen,
                          dir=job.folder, hub_endpoint=cfg.hub_endpoint if cfg.hub_endpoint != default_hub else "",
                          services=job.services, program_changed=machine["copied"])
        there = await run_there(session, job, layout, "mirror", asdict(plan), report)
    finally:
        session.close()
    await wait_answering(cfg, peer_url, host, job.wait, report)
    name_in_this_mirror(job.config, peer_url, host, report)
    await name_in_cluster(admin, peer_url, host, report)
    return {"name": name, "url": peer_url, "peer_of": this_url, **there}


def cluster_ca(cfg: Any) -> str:
    """The cluster CA's certificate, as this mirror checks its clients against it; empty when it cannot be read
    (then a certificate is signed anew, which is never wrong)."""
    try:
        return Path(cfg.tls_files()[2]).read_text()
    except OSError:
        return ""


async def sign(admin: Admin, key: dict[str, Any], name: str, hosts: list[str], host: str,
               report: Callable[[Progress], None], ca: str) -> tuple[str, str]:
    """The certificate there when it still fits, else a new one from the cluster CA for the key there."""
    from llmgw.control import AdminError
    from llmgw.trust import mirror_certificate_fits

    report(Progress(host, STEP_SIGN, "doing"))
    if mirror_certificate_fits(key["certificate"], ca, key["csr"], name, hosts):
        report(Progress(host, STEP_SIGN, "unchanged", f"the certificate there is the cluster CA's, for {name}"))
        return key["certificate"], ca
    try:
        made = await asyncio.to_thread(admin.call, "POST", "/api/v1/mirrors/certificate",
                                       {"name": name, "hosts": hosts, "csr": key["csr"]})
    except AdminError as e:
        raise StepFailed(STEP_SIGN, f"{STEP_SIGN}: the control plane refused: {e}") from None
    until = dt.datetime.fromtimestamp(made["expires_at"], dt.UTC).strftime("%Y-%m-%d")
    report(Progress(host, STEP_SIGN, "done", f"{name}, for {', '.join(made['hosts'])}, until {until}"))
    return made["certificate"], made["ca"]


async def wait_answering(cfg: Any, url: str, host: str, wait: float, report: Callable[[Progress], None]) -> None:
    """Until the new mirror answers this one's certificate over its TLS (so it names the address dialled)."""
    from llmgw.errors import ExpectedError
    from llmgw.mirror import MirrorClient, MirrorError, client_context

    report(Progress(host, STEP_WAIT, "doing", url))
    try:
        client = MirrorClient(url, client_context(cfg), timeout=5)
    except ExpectedError as e:
        raise StepFailed(STEP_WAIT, f"{STEP_WAIT}: {e}") from None
    deadline = time.monotonic() + wait
    said = ""
    while True:
        try:
            await client.health()
            break
        except MirrorError as e:
            said = str(e)
        if time.monotonic() >= deadline:
            raise StepFailed(STEP_WAIT, f"the mirror on {host} was installed but {url} has not answered in "
                                        f"{wait:g} s ({said}); see its log there (journalctl -u llmgw-mirror, or "
                                        "var/log/llmgw/llmgw-mirror.service.log under the install's root) and "
                                        "whether its port is open to this machine")
        await asyncio.sleep(0.5)
    report(Progress(host, STEP_WAIT, "done", url))


def name_in_this_mirror(config: str, peer_url: str, host: str, report: Callable[[Progress], None]) -> None:
    """The new mirror in this one's mirror.yaml `peers`: the running mirror reads the file again by itself."""
    from llmgw.config import ConfigError, MirrorConfig, from_dict

    path = Path(config)
    doc = yaml.safe_load(path.read_text()) or {}
    if not isinstance(doc, dict):
        raise StepFailed(STEP_PEERS, f"{path} is not a YAML mapping; fix it, then run again")
    peers = [str(p).rstrip("/") for p in doc.get("peers") or []]
    if peer_url in peers:
        report(Progress(host, STEP_PEERS, "unchanged", f"{path} names {peer_url}"))
        return
    doc["peers"] = [*peers, peer_url]
    try:
        from_dict(MirrorConfig, doc)
    except ConfigError as e:
        raise StepFailed(STEP_PEERS, f"{path}: {e}; fix it, then run again") from None
    mode = path.stat().st_mode & 0o777
    write_atomic(path, yaml.safe_dump(doc, sort_keys=False, default_flow_style=False).encode(), mode)
    report(Progress(host, STEP_PEERS, "done", f"{path}; the mirror here keeps in step with it within seconds, "
                                               "without a restart"))


async def name_in_cluster(admin: Admin, peer_url: str, host: str, report: Callable[[Progress], None]) -> None:
    current = (await asyncio.to_thread(admin.call, "GET", "/api/v1/config", None, {"path": "mirror"}))["value"] or {}
    peers = [str(p).rstrip("/") for p in current.get("peers") or []]
    unset = "" if current.get("url") else (
        "; mirror.url is not set, so the cluster uses no mirror yet: "
        "`llmgw ctl config set mirror.url https://THIS-MACHINE:8600`")
    if peer_url in peers or (current.get("url") or "").rstrip("/") == peer_url:
        report(Progress(host, STEP_CLUSTER, "unchanged", f"mirror.peers names {peer_url}{unset}"))
        return
    await asyncio.to_thread(admin.call, "POST", "/api/v1/config",
                            {"set": {"mirror.peers": json.dumps([*peers, peer_url])}})
    report(Progress(host, STEP_CLUSTER, "done", f"mirror.peers: {', '.join([*peers, peer_url])}{unset}"))
