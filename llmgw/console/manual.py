"""The manual: docs/*.md inside the program, readable where no browser is (llmgw/manualpages.py finds them:
the checkout's docs/, or the built program's own copy). The portal serves the same pages at /docs."""

from __future__ import annotations

import urwid

from llmgw.console.ui import App, text_list
from llmgw.errors import ExpectedError
from llmgw.manualpages import manual_dir, pages

__all__ = ["Manual", "manual_dir", "pages"]


class Manual:
    title = "Manual"
    command = "less docs/NAME.md in a checkout; llmgw ctl … --help"
    keys = "↑↓ choose  Enter read  Esc back to the pages"
    refreshes = False
    chooses_focus = True

    def __init__(self) -> None:
        self.reading = ""  # the page open, "" for the list
        self.names: list[str] = []
        self.walker: urwid.SimpleFocusListWalker | None = None
        self.chosen = 0

    def load(self) -> tuple[str, object]:
        folder = manual_dir()
        if folder is None:
            raise ExpectedError("this build of llmgw carries no manual (docs/*.md): `python3 build.py dist` "
                                "puts the pages inside the program it builds")
        if self.reading:
            return "page", (folder / self.reading).read_text(errors="replace")
        return "list", pages(folder)

    def show(self, data: tuple[str, object]) -> urwid.Widget:
        kind, value = data
        if kind == "page":
            return text_list([("title", self.reading), "", *str(value).splitlines()])
        listed: list[tuple[str, str]] = value  # type: ignore[assignment]
        self.names = [name for name, _ in listed]
        rows = [urwid.AttrMap(urwid.SelectableIcon(f"  {name:<22} {title}", cursor_position=0), None, "focus")
                for name, title in listed]
        self.walker = urwid.SimpleFocusListWalker(rows)
        if rows:
            self.walker.set_focus(min(self.chosen, len(rows) - 1))
        return urwid.ListBox(self.walker)

    def keypress(self, app: App, key: str) -> bool:
        if key == "enter" and not self.reading and self.walker is not None and self.names:
            self.chosen = self.walker.focus or 0
            self.reading = self.names[self.chosen]
            app.refresh(again=False)
            return True
        if key in ("esc", "backspace") and self.reading:
            self.reading = ""
            app.refresh(again=False)
            return True
        return False
