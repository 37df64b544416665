"""The manual: docs/*.md inside the program, readable where no browser is.

From a checkout the pages are the checkout's docs/; in the built program
(dist/llmgw.pyz) build.py copies them into the package as llmgw/manual/,
which the archive unpacks with the rest of llmgw. The package's own copy
comes first, so an installed program shows the pages of its own version.
"""

from __future__ import annotations

from pathlib import Path

import urwid

import llmgw
from llmgw.console.ui import App, text_list
from llmgw.errors import ExpectedError


def manual_dir() -> Path | None:
    here = Path(llmgw.__file__).resolve().parent
    for candidate in (here / "manual", here.parent / "docs"):
        if any(candidate.glob("*.md")):
            return candidate
    return None


def pages(folder: Path) -> list[tuple[str, str]]:
    """(file name, its title: the first heading) for each page, by file name."""
    found = []
    for path in sorted(folder.glob("*.md")):
        title = next((line.lstrip("# ").strip() for line in path.read_text(errors="replace").splitlines()
                      if line.startswith("# ")), path.stem)
        found.append((path.name, title))
    return found


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
