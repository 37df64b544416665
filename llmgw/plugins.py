"""Plugins: detectors, engines, scorers and weight sources from other installed distributions.

A distribution adds to llmgw by naming an object under one of four
entry-point groups (docs/plugins.md has what each must provide and a whole
example package):

    llmgw.detectors       guard detectors (kind, find)                 the server
    llmgw.engines         agent engines (name, needs_weights, …)       the agent, and the server's catalog
    llmgw.scorers         routing scorers (name, score)                the server
    llmgw.weight_sources  where weights come from (a Fetcher)          the agent

llmgw's own built-ins are in the same groups in its own metadata, but the
loader always includes them from BUILTINS, not from the metadata: the
zipapp (`python3 build.py dist`) carries llmgw's sources without a
.dist-info, and a checkout run with PYTHONPATH has none either.

A plugin that fails to import, raises, or gives something of the wrong
shape is left out with one warning naming it and its distribution: a broken
plugin must not take the gateway down. A plugin whose kind or name is
already taken (by a built-in or an earlier plugin) is refused too, with a
warning saying so: two detectors answering to one kind would make a policy
mean whatever was installed last.

This module sits on the lowest floor: it imports nothing of llmgw's but the
version, and knows the built-ins only by their "module:attribute" names.
`load` returns a `Plugins` the caller keeps; nothing is kept here.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from llmgw import __version__

log = logging.getLogger("llmgw.plugins")

DETECTORS = "llmgw.detectors"
ENGINES = "llmgw.engines"
SCORERS = "llmgw.scorers"
WEIGHT_SOURCES = "llmgw.weight_sources"
GROUPS = (DETECTORS, ENGINES, SCORERS, WEIGHT_SOURCES)


@dataclass(frozen=True)
class Shape:
    """What every object a group's plugin gives must have."""

    what: str
    """How a person calls one: "detector"."""

    key: str
    """The attribute naming it, which must be unique in the group: "kind" or "name"."""

    needs: tuple[str, ...]
    """Methods it must have, besides the key."""

    builtin: str
    """llmgw's own, as "module:attribute"; the same value setup.cfg's entry point has."""

    also: tuple[str, ...] = ()
    """Attributes it must have that are not methods."""


SHAPES: Mapping[str, Shape] = {
    DETECTORS: Shape("detector", "kind", ("find",), "llmgw.guard.default_detectors:shipped"),
    ENGINES: Shape("engine", "name", ("validate", "command", "installed"),
                   "llmgw.engines.default_engines:shipped", also=("needs_weights",)),
    SCORERS: Shape("scorer", "name", ("score",), "llmgw.router.scheduler.default_scorers:shipped"),
    WEIGHT_SOURCES: Shape("weight source", "kind", ("claims", "cache_parts", "url"),
                          "llmgw.agent.weights.default_sources:shipped"),
}

BUILTIN_DISTRIBUTION = "llmgw"


@dataclass(frozen=True)
class Plugin:
    """One entry point found, and what came of loading it."""

    group: str
    name: str
    """The entry point's name, as the distribution wrote it."""

    distribution: str
    version: str
    value: str
    """Where it points: "module:attribute"."""

    provides: tuple[str, ...] = ()
    """The kinds or names it added: what a policy, a profile or a catalog names."""

    error: str = ""
    """Why it was left out ("raised ImportError: …"); "" when it loaded."""

    @property
    def loaded(self) -> bool:
        return not self.error

    @property
    def builtin(self) -> bool:
        return self.distribution == BUILTIN_DISTRIBUTION

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "name": self.name, "distribution": self.distribution,
                "version": self.version, "value": self.value, "provides": list(self.provides),
                "loaded": self.loaded, "error": self.error}


@dataclass
class Plugins:
    """What `load` found: every plugin (loaded or not) and the objects of those that loaded."""

    found: list[Plugin] = field(default_factory=list)
    _objects: dict[str, list[tuple[Plugin, Any]]] = field(default_factory=dict)

    def objects(self, group: str, *, builtin: bool = True) -> list[Any]:
        """The objects of `group`, built-ins first; without them when `builtin` is False."""
        return [obj for plugin, obj in self._objects.get(group, []) if builtin or not plugin.builtin]

    def provided(self, group: str) -> list[str]:
        """Every kind or name `group` has, built-ins included."""
        return [name for p in self.found if p.group == group and p.loaded for name in p.provides]

    def failed(self) -> list[Plugin]:
        return [p for p in self.found if not p.loaded]

    def as_list(self, *, builtin: bool = False) -> list[dict[str, Any]]:
        """For JSON (the admin API's status, `doctor --json`): the site's plugins, or all with `builtin`."""
        return [p.as_dict() for p in self.found if builtin or not p.builtin]


EntryPoints = Callable[[str], Iterable[metadata.EntryPoint]]


def _installed() -> EntryPoints:
    """The installed distributions' entry points, read once, by group.

    One read for all the groups: each `metadata.entry_points(group=…)` reads
    every installed distribution's metadata again, and three of them cost a
    control plane's start 39 ms against 10 for one (a few hundred
    distributions installed).
    """
    everything = metadata.entry_points()
    return lambda group: everything.select(group=group)


def load(groups: Sequence[str] = GROUPS, *, args: Mapping[str, tuple[Any, ...]] | None = None,
         entry_points: EntryPoints | None = None, quiet: bool = False) -> Plugins:
    """Load llmgw's built-ins and every installed plugin of `groups`, once, at start.

    `args` are what a group's factories are called with: the weight sources
    are given the agent's settings (WeightSettings). A built-in that fails
    is llmgw's own bug and raises; a plugin that fails is left out with a
    warning in the log and in the returned Plugins; with `quiet` (a
    server's worker, whose main process has said it already) only in the
    returned Plugins.
    """
    plugins = Plugins()
    entry_points = entry_points or _installed()
    for group in groups:
        shape = SHAPES[group]
        call_with = (args or {}).get(group, ())
        taken: set[str] = set()
        module, _, attribute = shape.builtin.partition(":")
        made = _made(getattr(importlib.import_module(module), attribute), call_with)
        problem, objects = _check(made, shape, taken)
        if problem:
            raise TypeError(f"llmgw's own {shape.what}s ({shape.builtin}) {problem}")
        _keep(plugins, Plugin(group, "llmgw", BUILTIN_DISTRIBUTION, __version__, shape.builtin,
                              tuple(_key(o, shape) for o in objects)), objects, taken, shape)
        for point in entry_points(group):
            if point.value.replace(" ", "") == shape.builtin:
                continue  # llmgw's own metadata naming the built-ins, already included above
            dist = getattr(point, "dist", None)
            plugin = Plugin(group, point.name, dist.name if dist else "unknown distribution",
                            dist.version if dist else "", point.value)
            try:
                made = _made(point.load(), call_with)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - a plugin's failure, whatever it is, is told
                _refuse(plugins, plugin, shape, f"raised {_one_line(e)}", quiet)
                continue
            problem, objects = _check(made, shape, taken)
            if problem:
                _refuse(plugins, plugin, shape, problem, quiet)
                continue
            _keep(plugins, Plugin(group, plugin.name, plugin.distribution, plugin.version, plugin.value,
                                  tuple(_key(o, shape) for o in objects)), objects, taken, shape)
            (log.debug if quiet else log.info)("plugin %s (%s %s) added the %s %s", plugin.name,
                                               plugin.distribution, plugin.version, shape.what,
                                               ", ".join(_key(o, shape) for o in objects))
    return plugins


def _made(target: Any, call_with: tuple[Any, ...]) -> Any:
    """What the entry point names, called when it is a class or a function: the object(s) to add."""
    if inspect.isclass(target) or inspect.isroutine(target):
        return target(*call_with)
    return target


def _check(made: Any, shape: Shape, taken: set[str]) -> tuple[str, list[Any]]:
    """("", the objects) when `made` is one object of the group's shape or a list of them; (why not, [])."""
    objects = [made] if _has_shape(made, shape) else made
    if isinstance(objects, (str, bytes)) or not isinstance(objects, Iterable):
        return _shape_problem(made, shape), []
    objects = list(objects)
    if not objects:
        return f"gave no {shape.what}", []
    names: set[str] = set()
    for obj in objects:
        if not _has_shape(obj, shape):
            return _shape_problem(obj, shape), []
        name = _key(obj, shape)
        if name in taken or name in names:
            return (f"gives {_a(shape.what)} with the {shape.key} {name!r}, which is taken; a plugin adds "
                    f"{shape.what}s, it does not replace one"), []
        names.add(name)
    return "", objects


def _has_shape(obj: Any, shape: Shape) -> bool:
    name = getattr(obj, shape.key, None)
    return (not inspect.isclass(obj) and isinstance(name, str) and bool(name)
            and all(callable(getattr(obj, method, None)) for method in shape.needs)
            and all(hasattr(obj, attribute) for attribute in shape.also))


def _shape_problem(obj: Any, shape: Shape) -> str:
    wanted = ", ".join((f"a {shape.key} (text)", *shape.also, *(f"{m}()" for m in shape.needs)))
    return f"gave {_one_line(obj)[:80]}, which is not {_a(shape.what)}: {_a(shape.what)} has {wanted}"


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def _key(obj: Any, shape: Shape) -> str:
    name: str = getattr(obj, shape.key)  # a str: _has_shape has checked it
    return name


def _keep(plugins: Plugins, plugin: Plugin, objects: list[Any], taken: set[str], shape: Shape) -> None:
    plugins.found.append(plugin)
    plugins._objects.setdefault(plugin.group, []).extend((plugin, obj) for obj in objects)
    taken.update(_key(o, shape) for o in objects)


def _refuse(plugins: Plugins, plugin: Plugin, shape: Shape, problem: str, quiet: bool) -> None:
    plugins.found.append(Plugin(plugin.group, plugin.name, plugin.distribution, plugin.version, plugin.value,
                                (), problem))
    (log.debug if quiet else log.warning)(
        "the %s plugin %s (%s %s, %s) %s; it is left out, and the gateway runs without it",
        shape.what, plugin.name, plugin.distribution, plugin.version, plugin.value, problem)


def describe(entry: Mapping[str, Any]) -> str:
    """One plugin (Plugin.as_dict, as the admin API and doctor's JSON have it) in a line for people."""
    origin = f"{entry['name']} from {entry['distribution']} {entry['version']}".rstrip()
    if entry["loaded"]:
        return f"{origin} ({entry['group']}): {', '.join(entry['provides'])}"
    return f"{origin} ({entry['group']}): NOT LOADED, it {entry['error']}"


def _one_line(value: Any) -> str:
    text = f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else repr(value)
    return " ".join(text.split())
