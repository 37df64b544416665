"""Models: the catalog, each model's state and replicas; add, serve, scale, stop and start; llmgw's presets.

The same admin API calls as `llmgw ctl models`, `llmgw ctl model add |
serve | scale | stop | start` and `llmgw ctl model presets [add]`
(llmgw/cli/models.py): the rules and their sentences are the control
plane's, so a refusal here reads as it does in a shell.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import urwid

from llmgw.console.overview import STATE_COLOUR
from llmgw.console.ui import App
from llmgw.control import AdminClient, AdminError


def _path(name: str) -> str:
    return "/api/v1/models/" + quote(name, safe="")


def _number(values: dict[str, str], key: str, label: str) -> int | None:
    text = values.get(key, "")
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise AdminError(f"{label} must be a whole number, like 2; got {text!r}") from None


def read_model_file(path: str) -> dict[str, Any]:
    """A model file (YAML or JSON) as the document `llmgw ctl model add -f` sends."""
    import yaml

    from llmgw.config import parse_yaml

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise AdminError(f"{path}: {(e.strerror or str(e)).lower()}") from None
    try:
        doc = parse_yaml(text)
    except yaml.YAMLError as e:
        raise AdminError(f"{path} is not YAML or JSON: {e}") from None
    if not isinstance(doc, dict):
        raise AdminError(f"{path} must hold one model: a mapping with name and profiles (docs/models.md)")
    return doc


# What each preset's state is called on the screen (llmgw ctl model presets calls them the same).
PRESET_STATES = {"in_catalog": "in catalog", "declined": "declined", "made": "made by other",
                 "kind_declined": "kind declined", "no_node": "fits no node", "to_add": "to be added",
                 "fits": "fits"}
PRESET_COLOUR = {"in_catalog": "good", "to_add": "warn", "fits": "warn", "no_node": "dim", "declined": "dim",
                 "made": "dim", "kind_declined": "dim"}
_PRESET = "preset:"  # a preset's rows in `names`, apart from the models'


class Models:
    title = "Models"
    command = "llmgw ctl models; llmgw ctl model add|serve|scale|stop|start|presets"
    keys = "↑↓ choose  a add  v serve  s scale  t stop  r start  p add the preset"
    chooses_focus = True  # show() puts the focus back on the model chosen

    def __init__(self, client: AdminClient) -> None:
        self.client = client
        self.walker: urwid.SimpleFocusListWalker | None = None
        self.names: list[str] = []  # the model or preset:NAME on each row of the walker ("" for rows that are neither)
        self.chosen = ""
        self.shown: set[str] | None = None  # the models the last show() listed

    def load(self) -> dict[str, Any]:
        models = self.client.call("GET", "/api/v1/models")
        try:
            presets = self.client.call("GET", "/api/v1/presets")
        except AdminError as e:
            if e.status != 404:
                raise
            presets = None  # a control plane from before presets
        return {"models": models, "presets": presets}

    def _row(self) -> str:
        if self.walker is not None and self.walker.focus is not None and self.names:
            return self.names[self.walker.focus]
        return ""

    def selected(self) -> str:
        """The model on the row in focus, or ""."""
        row = self._row()
        return "" if row.startswith(_PRESET) else row

    def selected_preset(self) -> str:
        row = self._row()
        return row[len(_PRESET):] if row.startswith(_PRESET) else ""

    def show(self, data: dict[str, Any]) -> urwid.Widget:
        models = data["models"]
        self.chosen = self._row() or self.chosen
        # A model just added or served takes the focus, so the next key (s, t, r) acts on it.
        added = [m["name"] for m in models if self.shown is not None and m["name"] not in self.shown]
        self.shown = {m["name"] for m in models}
        if added:
            self.chosen = added[0]
        rows: list[urwid.Widget] = [urwid.Text(("dim", f"  {'state':<10}{'name':<30}{'replicas':<12}"
                                                       f"{'engine':<12}source"))]
        self.names = [""]
        for m in models:
            scaling = m["scaling"]
            count = f"{m['replicas']['ready']}/{scaling['min']}" + (
                f"-{scaling['max']}" if scaling["max"] != scaling["min"] else "")
            text: list[Any] = [(STATE_COLOUR.get(m["state"], ""), f"  {m['state']:<10}"),
                    f"{m['name']:<30}{count:<12}{','.join(e or '-' for e in m['engines']):<12}{m['source'] or '-'}"]
            rows.append(urwid.AttrMap(urwid.SelectableIcon(text, cursor_position=0), None, "focus"))
            self.names.append(m["name"])
            if m.get("parked"):
                rows.append(urwid.Text(("bad", f"      {m['parked']}")))
                self.names.append(m["name"])
        if not models:
            rows.append(urwid.Text(("dim", "  No models yet: a adds one from a model file, v serves weights "
                                           "from a path, https:// or hf: source.")))
            self.names.append("")
        if data.get("presets"):
            self._presets(data["presets"], rows)
        self.walker = urwid.SimpleFocusListWalker(rows)
        if self.chosen and self.chosen in self.names:
            self.walker.set_focus(self.names.index(self.chosen))
        elif any(self.names):
            self.walker.set_focus(next(i for i, n in enumerate(self.names) if n))
        return urwid.ListBox(self.walker)

    def _presets(self, presets: dict[str, Any], rows: list[urwid.Widget]) -> None:
        auto = "on: the leader adds one where it fits" if presets["auto"] else "off: only by hand"
        rows += [urwid.Divider(), urwid.Text([("title", "  Presets"), ("dim", f"  llmgw's own models; presets.auto "
                                                                               f"{auto}")])]
        self.names += ["", ""]
        for p in presets["presets"]:
            state = PRESET_STATES.get(p["state"], p["state"])
            text: list[Any] = [(PRESET_COLOUR.get(p["state"], ""), f"  {state:<14}"),
                               f"{p['name']:<16}{p['makes']:<10}{p['card']}"]
            rows.append(urwid.AttrMap(urwid.SelectableIcon(text, cursor_position=0), None, "focus"))
            self.names.append(_PRESET + p["name"])
            said = p["said"] + (f"; its last try failed: {p['error']}" if p.get("error") else "")
            rows.append(urwid.Text(("bad" if p.get("error") else "dim", f"      {said}")))
            self.names.append(_PRESET + p["name"])

    def keypress(self, app: App, key: str) -> bool:
        name = self.selected()
        preset = self.selected_preset()
        if key == "p":
            if not preset:
                app.say("choose a preset first: they are listed under the models", bad=True)
                return True
            app.say(f"adding {preset}: Hugging Face is asked for its commit…")
            app.work(lambda: self.client.call("POST", "/api/v1/presets/" + quote(preset, safe=""), {}),
                     lambda answer: self._done(app, answer))
            return True
        if key == "a":
            app.form("Add a model from a model file (docs/models.md)", [("file", "model file", "")],
                     lambda v: self.client.call("POST", "/api/v1/models", {"spec": read_model_file(v["file"])}),
                     then=lambda answer: self._done(app, answer))
        elif key == "v":
            app.form("Serve weights", [
                ("source", "source", ""), ("engine", "engine (blank: by file)", ""), ("name", "name", ""),
                ("gpus", "GPUs a replica", ""), ("context", "context (tokens)", ""), ("min", "replicas", "1")],
                lambda v: self.client.call("POST", "/api/v1/models/serve", _serve_body(v)),
                then=lambda answer: self._done(app, answer))
        elif key == "s" and name:
            app.form(f"Scale {name}", [("min", "at least", ""), ("max", "at most", "")],
                     lambda v: self.client.call("POST", _path(name) + "/scale",
                                                {"min": _number(v, "min", "at least"),
                                                 "max": _number(v, "max", "at most")}),
                     then=lambda answer: self._done(app, answer))
        elif key == "t" and name:
            self._act(app, lambda: self.client.call("POST", _path(name) + "/stop", {}))
        elif key == "r" and name:
            self._act(app, lambda: self.client.call("POST", _path(name) + "/start", {}))
        else:
            return False
        return True

    def _act(self, app: App, call) -> None:
        app.say("asking the control plane…")
        app.work(call, lambda answer: self._done(app, answer))

    def _done(self, app: App, answer: dict[str, Any]) -> None:
        model = answer.get("model") or {}
        said = f"{model['name']}: {model['state']}, version {model['version']}" if model else "done"
        app.say("; ".join([said, *(answer.get("notes") or [])]))
        app.refresh()


def _serve_body(values: dict[str, str]) -> dict[str, Any]:
    if not values.get("source"):
        raise AdminError("serve needs a source: a path on the nodes, https://… or hf:org/repo/file.gguf")
    body: dict[str, Any] = {"source": values["source"], "engine": values.get("engine") or None,
                            "name": values.get("name") or None, "gpus": _number(values, "gpus", "GPUs a replica"),
                            "context": _number(values, "context", "context"),
                            "min": _number(values, "min", "replicas")}
    return {k: v for k, v in body.items() if v is not None}
