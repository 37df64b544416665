"""llmgw's presets in a running cluster: the leader's pass that adds them, and what the admin API shows and changes.

Every EVERY seconds (and at once when this control plane comes to lead, or
`presets` or `hub` change) the leader judges each preset (catalog/presets.py)
against the catalog, the nodes heard from and `presets`, and with
`presets.auto` on adds each one judged `to_add` through the catalog, as the
actor "llmgw (presets)": pinned to Hugging Face's commit like any `hf:` model,
on demand, so nothing is fetched until someone asks for it. A hub that does
not answer fails the add with its sentence, kept for `ctl model presets` and
tried again next pass; nothing is added unpinned.

A preset's model removed (`llmgw ctl model remove`) is put in
`presets.declined`, so the next pass does not add it back; adding it by hand
takes it off.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmgw.account import Actor
from llmgw.config import ClusterSettings, ModelSettings
from llmgw.control.catalog.changes import Refusal
from llmgw.control.catalog.cluster import NodeView
from llmgw.control.catalog.placement import Policy, node_lost
from llmgw.control.catalog.presets import PRESET, Verdict, judge, makes, preset
from llmgw.control.settings import ClusterSettingsWatcher, SettingsError
from llmgw.errors import N_
from llmgw.protocol import ProtocolError
from llmgw.store import CatalogStore, StoreError
from llmgw.tasks import cancel_and_wait, event_within

if TYPE_CHECKING:
    from llmgw.control.catalog.service import Catalog

log = logging.getLogger("llmgw.presets")

EVERY = 30.0
# Who adds a preset by itself, as the audit log names it.
ACTOR = Actor("llmgw (presets)", "presets")
TRIES = 3


def _settings_makes(m: ModelSettings) -> str:
    """What a model from the settings makes: only what it says (an endpoint's model that declares nothing is taken
    to do everything, pictures too, which would keep every preset out)."""
    if m.comfyui is not None:
        return m.comfyui.output
    return "pictures" if "images" in m.capabilities else ""


class Presets:
    def __init__(self, store: CatalogStore, catalog: Callable[[], Catalog], settings: ClusterSettingsWatcher, *,
                 leading: Callable[[], bool], policy: Callable[[], Policy] = Policy,
                 clock: Callable[[], float] = time.time, every: float = EVERY) -> None:
        self.store = store
        self.catalog = catalog
        self.settings = settings
        self.leading = leading
        self.policy = policy
        self.clock = clock
        self.every = every
        self.failed: dict[str, str] = {}  # preset -> why the pass's last try to add it failed
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watched = self._watched_part(settings.current)
        settings.subscribe(self._settings_changed)

    # --- judging ---------------------------------------------------------------------------------

    async def judged(self) -> list[Verdict]:
        """Each preset's state now, from the store's catalog and nodes and the settings in force."""
        current = self.settings.current
        catalog = {m.name: makes(m.spec) for m in await self.store.list_models(include_removed=True)
                   if m.removed_at is None}
        for m in current.models:
            catalog.setdefault(m.name, _settings_makes(m))
        now, policy = self.clock(), self.policy()
        nodes = []
        for record in await self.store.list_nodes():
            try:
                view = NodeView.from_record(record)
            except ProtocolError:
                continue  # a record from a newer agent this control plane cannot read
            if node_lost(view, now, policy) is None:
                nodes.append(view)
        return judge(current.presets.auto, current.presets.declined, catalog, nodes)

    async def view(self) -> dict[str, Any]:
        """For `llmgw ctl model presets` and the console."""
        current = self.settings.current.presets
        rows = []
        for v in await self.judged():
            row = v.view()
            if v.state == "to_add" and self.failed.get(v.name):
                row["error"] = self.failed[v.name]
            rows.append(row)
        return {"auto": current.auto, "declined": list(current.declined), "presets": rows}

    # --- the leader's pass -----------------------------------------------------------------------

    async def run_pass(self) -> list[str]:
        """Add each preset judged `to_add`; the names added."""
        if not self.settings.current.presets.auto:
            return []
        added = []
        for v in await self.judged():
            if v.state != "to_add":
                continue
            try:
                await self._add(ACTOR, v.name)
            except Refusal as e:
                if self.failed.get(v.name) != str(e):
                    log.warning("the preset %s was not added: %s; tried again every %g s", v.name, e, self.every)
                self.failed[v.name] = str(e)
                continue
            self.failed.pop(v.name, None)
            added.append(v.name)
            log.info("the preset %s is added, on demand: it fits on %s and the catalog made no %s",
                     v.name, ", ".join(v.nodes), v.makes)
        return added

    async def _add(self, actor: Actor, name: str) -> dict[str, Any]:
        catalog = self.catalog()
        if catalog.pinner is None:
            # A preset is never added as its source is written: that would follow whatever is pushed to main.
            raise Refusal(N_("{name} cannot be pinned: this catalog has no Hugging Face hub to ask (hub.endpoint)"),
                          409, "no_hub", params={"name": name})
        # The preset's publisher is taken on llmgw's word, as an administrator's --trust would be; the origin says so.
        answer = await catalog.add(actor, preset(name).document(), trust=True)
        answer["notes"] = [f"{note.split(' is not among ', 1)[0]}'s weights are taken as one of llmgw's presets"
                           if note.endswith("(--trust)") else note for note in answer.get("notes", [])]
        return answer

    def wake(self) -> None:
        """A pass now rather than within EVERY."""
        self._wake.set()

    def start(self) -> None:
        self._wake.set()  # the first pass at once: a control plane that leads from the start adds what fits
        self._task = asyncio.create_task(self._loop(), name="presets")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _loop(self) -> None:
        while True:
            await event_within(self._wake, self.every)
            self._wake.clear()
            if not self.leading():
                continue
            try:
                await self.run_pass()
            except StoreError as e:
                log.debug("presets not looked at: %s", e)
            except Exception:
                log.exception("the presets pass failed")

    @staticmethod
    def _watched_part(settings: ClusterSettings) -> tuple[Any, ...]:
        return settings.presets, settings.hub

    def _settings_changed(self, settings: ClusterSettings) -> None:
        part = self._watched_part(settings)
        if part != self._watched:
            self._watched = part
            self.wake()

    # --- what an administrator changes -----------------------------------------------------------

    async def add(self, actor: Actor, name: str) -> dict[str, Any]:
        """Add a preset by hand, whatever the pass would say, and take it off `presets.declined`."""
        preset(name)
        answer = await self._add(actor, name)
        self.failed.pop(name, None)
        if await self._change_declined(actor, lambda names: [n for n in names if n != name]):
            answer["notes"] = [*answer.get("notes", []), "taken off presets.declined"]
        return answer

    async def set_auto(self, actor: Actor, on: bool) -> dict[str, Any]:
        await self.settings.change(actor.name, actor.via, set_={"presets.auto": "true" if on else "false"})
        self.wake()
        return await self.view()

    async def removed(self, actor: Actor, name: str) -> str:
        """A model removed from the catalog: a preset's is declined, so no pass adds it back. What to tell, or ""."""
        if name not in PRESET:
            return ""
        await self._change_declined(actor, lambda names: names if name in names else [*names, name])
        return (f"{name} is one of llmgw's presets: it is in presets.declined now, so it is not added again "
                f"(llmgw ctl model presets add {name} adds it back)")

    async def _change_declined(self, actor: Actor, change: Callable[[list[str]], list[str]]) -> bool:
        """`presets.declined` changed on the version it was read at, tried again when another change landed first;
        whether it changed."""
        for attempt in range(TRIES):
            version, names = await self.settings.get("presets.declined")
            wanted = change(list(names or []))
            if wanted == names:
                return False
            try:
                await self.settings.change(actor.name, actor.via, set_={"presets.declined": json.dumps(wanted)},
                                           expected_version=version)
            except SettingsError as e:
                if e.code == "conflict" and attempt < TRIES - 1:
                    continue
                raise
            return True
        raise AssertionError("unreachable")
