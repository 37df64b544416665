"""Settings: the cluster's settings (in the store, in force on every control plane within 5 s), edited and validated.

The same calls as `llmgw ctl config get | set | unset`: a change is sent
to the control plane, which validates it against the whole document and
refuses a bad one naming the key, so nothing invalid is ever kept.
"""

from __future__ import annotations

from typing import Any

import urwid
import yaml

from llmgw.console.ui import App, text_list
from llmgw.control import AdminClient, AdminError


class Settings:
    title = "Settings"
    command = "llmgw ctl config get|set|unset|edit"
    keys = "s set a key  u put a key back to its default"
    refreshes = False  # read when opened and after a change: a refresh would scroll the reader back to the top

    def __init__(self, client: AdminClient) -> None:
        self.client = client

    def load(self) -> dict[str, Any]:
        return self.client.call("GET", "/api/v1/config")

    def show(self, current: dict[str, Any]) -> urwid.Widget:
        text = yaml.safe_dump(current["value"], sort_keys=False, default_flow_style=False).rstrip()
        return text_list([("title", f"The cluster's settings, version {current['version']} "
                                    "(docs/reference.md names every key)"), "",
                          *text.splitlines()])

    def keypress(self, app: App, key: str) -> bool:
        if key == "s":
            app.form("Set a key (checked by the control plane before it is kept)",
                     [("path", "key (router.cache.max_bytes)", ""), ("value", "value", "")],
                     lambda v: self._post({"set": {_path(v): v.get("value", "")}}),
                     then=lambda answer: self._changed(app, answer))
        elif key == "u":
            app.form("Put a key back to its default", [("path", "key", "")],
                     lambda v: self._post({"unset": [_path(v)]}), then=lambda answer: self._changed(app, answer))
        else:
            return False
        return True

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.client.call("POST", "/api/v1/config", body)

    def _changed(self, app: App, answer: dict[str, Any]) -> None:
        app.say(f"cluster settings version {answer['version']}; in force on every control plane within 5 s")
        app.refresh()


def _path(values: dict[str, str]) -> str:
    if not values.get("path"):
        raise AdminError("say which key, as a dotted path like router.cache.max_bytes (docs/reference.md)")
    return values["path"]
