"""A model from Hugging Face, pinned when it is added to the catalog.

`hf:org/repo/file` alone follows `main`: a file pushed upstream after the model was added would reach the next
node that fetches it, unchecked. So the control plane asks the hub, when the model is added, what the revision
is now, and keeps it:

- the source is rewritten to that commit (`…/file@<40 hex>`), which no later push moves;
- the sha256 Hugging Face publishes for each LFS file becomes the model's sha256 (or each file's in a set),
  which every node compares its copy with, refusing and deleting one that differs;
- the whole description (each file's size, sha256 and Hugging Face's scan; the publisher and why it was taken)
  is kept as the model's `origin`.

A file Hugging Face's scan marks unsafe is refused, and so is a publisher outside hub.trusted_publishers
unless an administrator says they checked it (`--trust`), which the origin and the audit log keep.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Literal

from llmgw.account import Actor
from llmgw.config import HubSettings
from llmgw.control.catalog.changes import Refusal
from llmgw.control.catalog.spec import ModelSpec, Origin, OriginFile
from llmgw.errors import N_
from llmgw.hub import Hub, HubError, HubFile, SourceError, parse_source

# Hugging Face's scan says one of safe, unsafe, suspicious, caution, unscanned…; only this is refused outright.
UNSAFE = "unsafe"


class Pinner:
    """Pins `hf:` sources through the hub the cluster's settings name (read at each use)."""

    def __init__(self, settings: Callable[[], HubSettings], hub: Callable[[HubSettings], Hub] | None = None,
                 clock: Callable[[], float] = time.time):
        self.settings = settings
        self.hub = hub or (lambda s: Hub(s.endpoint, s.token_file))
        self.clock = clock

    async def pin(self, spec: ModelSpec, actor: Actor, trust: bool = False,
                  compare_given: bool = True) -> tuple[ModelSpec, list[str]]:
        """The spec pinned, and what to tell about it; `spec` as it is when its source is not Hugging Face's.

        `compare_given`: a sha256 in the spec that is not the published one is refused. Off to look at what
        changed upstream (Catalog.update), where the spec's sums are the old pin's."""
        if not spec.source.lower().startswith("hf:"):
            return spec, []
        try:
            hf = parse_source(spec.source)
        except SourceError as e:
            raise Refusal(N_("{reason}"), 400, "invalid_model", params={"reason": str(e)}) from None
        settings = self.settings()
        trusted, trusted_by = _trust(settings, hf.org, actor, trust)
        try:
            info = await self.hub(settings).repo(hf.repo_id, hf.revision)
        except HubError as e:
            raise Refusal(N_("{reason}"), e.status, "hub", params={"reason": str(e)}) from None
        names = [hf.path] if hf.path else sorted(spec.files) or sorted(info.files)
        missing = [n for n in names if n not in info.files]
        if missing:
            listed = ", ".join(sorted(info.files)[:12]) or "none"
            raise Refusal(N_("{repo} has no file {name} at {revision} (commit {commit}); its files: {listed}"),
                          404, "not_found", params={"repo": hf.repo_id, "name": missing[0], "revision": hf.revision,
                                                    "commit": info.commit, "listed": listed})
        files = {n: info.files[n] for n in names}
        _refuse_unsafe(files)
        given = ({hf.path: spec.sha256} if hf.path else dict(spec.files)) if compare_given else {}
        for name, file in files.items():
            if given.get(name) and file.sha256 and given[name] != file.sha256:
                raise Refusal(N_("{name}'s sha256 was given as {given}, but Hugging Face publishes {published} for "
                                 "it at commit {commit}; check which copy you meant, or leave the sha256 out to "
                                 "take Hugging Face's"), 409, "checksum",
                              params={"name": name, "given": given[name], "published": file.sha256,
                                      "commit": info.commit})
        origin = Origin(
            hub=settings.endpoint, repo=hf.repo_id, revision=hf.revision, commit=info.commit,
            files={n: OriginFile(size=f.size, sha256=f.sha256, scan=f.scan) for n, f in files.items()},
            publisher=hf.org, trusted=trusted, trusted_by=trusted_by,
            pinned_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock())))
        pinned = dataclasses.replace(spec, source=hf.at(info.commit), origin=origin)
        if hf.path:
            pinned.sha256 = files[hf.path].sha256 or spec.sha256
        elif spec.files:
            pinned.files = {n: files[n].sha256 or spec.files[n] for n in names}
        notes = [f"pinned to commit {info.commit[:12]} of {hf.repo_id}"
                 + ("" if hf.pinned else f" ({hf.revision} now); llmgw ctl model update {spec.name} shows what "
                                         "changes upstream")]
        unchecked = sorted(n for n, f in files.items() if not f.sha256 and not given.get(n))
        if unchecked:
            notes.append(f"Hugging Face publishes no sha256 for {', '.join(unchecked[:5])} (kept in git, not LFS); "
                         "nodes fetch it at the pinned commit")
        if trusted == "administrator":
            notes.append(f"{hf.org} is not among hub.trusted_publishers; taken on {actor.name}'s word (--trust)")
        return pinned, notes


def _trust(settings: HubSettings, publisher: str, actor: Actor,
           trust: bool) -> tuple[Literal["publisher", "administrator"], str]:
    if settings.trusts(publisher):
        return "publisher", ""
    if trust:
        return "administrator", actor.name
    raise Refusal(N_("{publisher} is not among the publishers this cluster trusts ({trusted}); an administrator who "
                     "has checked the model may add it with --trust, or add {publisher} to hub.trusted_publishers"),
                  403, "untrusted_publisher",
                  params={"publisher": publisher, "trusted": ", ".join(settings.trusted_publishers) or "none"})


def _refuse_unsafe(files: dict[str, HubFile]) -> None:
    for name, file in files.items():
        if file.scan == UNSAFE:
            raise Refusal(N_("Hugging Face's scan marks {name} unsafe (it found what runs code or malware in it); "
                             "it is not served here"), 403, "unsafe", params={"name": name})
