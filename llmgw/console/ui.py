"""The frame every screen lives in: a tab bar, the screen, a line of keys and a line for what happened.

A screen is an object with a title, the shell command that does the same,
`load()` (blocking: run on a worker thread) and `show(data)` (on urwid's
loop: the widgets for what `load` returned). The frame refreshes the one
in view every `every` seconds, never two loads of it at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

import urwid

from llmgw.errors import explain

log = logging.getLogger("llmgw.console")

PALETTE = [
    ("tab", "light gray", "dark blue"),
    ("tab on", "white,bold", "dark cyan"),
    ("title", "white,bold", ""),
    ("dim", "dark gray", ""),
    ("good", "light green", ""),
    ("bad", "light red,bold", ""),
    ("warn", "yellow", ""),
    ("focus", "black", "light gray"),
    ("keys", "black", "light gray"),
    ("note", "yellow,bold", ""),
    ("field", "white", "dark gray"),
]


class Screen(Protocol):
    title: str
    command: str  # what does the same from a shell, said at the foot of the screen
    keys: str  # the screen's own keys, for the key line

    def load(self) -> Any: ...  # blocking; on a worker thread

    def show(self, data: Any) -> urwid.Widget: ...  # on the loop

    def keypress(self, app: App, key: str) -> bool: ...  # True when the screen took the key


def sentence(e: BaseException) -> str:
    """A failure as one sentence for the note line: never a traceback on a screen."""
    return explain(e) or f"unexpected {type(e).__name__}: {e}"


def lines(rows: list[Any]) -> list[urwid.Text]:
    """Text widgets for rows of markup ("text", or (attr, "text"), or a list of them)."""
    return [urwid.Text(row) for row in rows]


def text_list(rows: list[Any]) -> urwid.ListBox:
    """A screen of text rows, scrolled with the arrow keys and Page Up/Down."""
    return urwid.ListBox(urwid.SimpleFocusListWalker(lines(rows)))


class App:
    def __init__(self, screens: list[Screen], heading: str, every: float = 3.0) -> None:
        self.screens = screens
        self.heading = heading
        self.every = every
        self.current = 0
        self.body: urwid.WidgetPlaceholder = urwid.WidgetPlaceholder(urwid.Filler(urwid.Text("loading…")))
        self.tabs = urwid.Text("")
        self.keyline = urwid.Text("")
        self.shell = urwid.Text("")
        self.note = urwid.Text("")
        self.frame = urwid.Frame(self.body, header=urwid.Pile([self.tabs, urwid.Divider("─")]),
                                 footer=urwid.Pile([urwid.Divider("─"), self.note, self.shell,
                                                    urwid.AttrMap(self.keyline, "keys")]))
        self.top: urwid.WidgetPlaceholder = urwid.WidgetPlaceholder(self.frame)
        self.loop: urwid.MainLoop | None = None
        self._loading = False
        self._dialog = False
        self._alarm = None
        self._draw_tabs()

    # --- running ------------------------------------------------------------------------------

    def run(self) -> None:
        aloop = asyncio.new_event_loop()
        asyncio.set_event_loop(aloop)
        self.loop = urwid.MainLoop(self.top, PALETTE, event_loop=urwid.AsyncioEventLoop(loop=aloop),
                                   unhandled_input=self._key, handle_mouse=False)
        self.loop.set_alarm_in(0, lambda *_: self.refresh())
        try:
            self.loop.run()
        finally:
            aloop.close()

    def work(self, blocking: Callable[[], Any], done: Callable[[Any], None],
             failed: Callable[[BaseException], None] | None = None) -> None:
        """Run `blocking` on a worker thread; then `done(result)` (or `failed(error)`) on the loop."""
        aloop = asyncio.get_event_loop()
        future = aloop.run_in_executor(None, blocking)

        def finished(f: asyncio.Future) -> None:
            error = f.exception()
            try:
                if error is None:
                    done(f.result())
                elif failed is not None:
                    failed(error)
                else:
                    self.say(sentence(error), bad=True)
            except Exception as e:  # an answer of a shape not foreseen: a sentence, not a crash
                log.debug("showing an answer failed", exc_info=True)
                self.say(sentence(e), bad=True)
            finally:
                self.redraw()

        future.add_done_callback(finished)

    def redraw(self) -> None:
        if self.loop is not None:
            self.loop.draw_screen()

    # --- the screen in view -------------------------------------------------------------------

    @property
    def screen(self) -> Screen:
        return self.screens[self.current]

    def refresh(self, again: bool = True) -> None:
        """Load the screen in view now; and again every `every` seconds unless it is one read on demand."""
        if self._alarm is not None and self.loop is not None:
            self.loop.remove_alarm(self._alarm)
            self._alarm = None
        if again and getattr(self.screen, "refreshes", True) and self.loop is not None:
            self._alarm = self.loop.set_alarm_in(self.every, lambda *_: self.refresh())
        if self._loading:
            return
        self._loading = True
        screen = self.screen

        def shown(data: Any) -> None:
            self._loading = False
            if screen is self.screen:
                old, new = self.body.original_widget, screen.show(data)
                if isinstance(old, urwid.ListBox) and isinstance(new, urwid.ListBox) and \
                        not getattr(screen, "chooses_focus", False):
                    # A refresh keeps the reader where they were rather than back at the top.
                    count = len(new.body)  # type: ignore[arg-type]  # our walkers are lists
                    if count:
                        new.set_focus(min(old.focus_position, count - 1))
                self.body.original_widget = new

        def failed(error: BaseException) -> None:
            self._loading = False
            if screen is self.screen:
                self.body.original_widget = urwid.Filler(urwid.Text(("bad", sentence(error))), valign="top")

        self.work(screen.load, shown, failed)

    def switch(self, index: int) -> None:
        self.current = index % len(self.screens)
        self.body.original_widget = urwid.Filler(urwid.Text("loading…"), valign="top")
        self.note.set_text("")
        self._draw_tabs()
        self.refresh()

    def _draw_tabs(self) -> None:
        markup: list[Any] = [("title", f" {self.heading} ")]
        for i, screen in enumerate(self.screens):
            markup += [" ", ("tab on" if i == self.current else "tab", f" {i + 1} {screen.title} ")]
        self.tabs.set_text(markup)
        own = f"{self.screen.keys}  " if self.screen.keys else ""
        screens = f"1-{len(self.screens)}/Tab screens  " if len(self.screens) > 1 else ""
        self.keyline.set_text(f" {own}{screens}q quit")
        self.shell.set_text(("dim", f"from a shell: {self.screen.command}"))

    def say(self, text: str, bad: bool = False) -> None:
        self.note.set_text(("bad" if bad else "note", text))

    def _key(self, key: Any) -> None:
        if self._dialog or not isinstance(key, str):
            return
        if self.screen.keypress(self, key):
            return
        if key in ("q", "Q"):
            raise urwid.ExitMainLoop()
        if key == "tab":
            self.switch(self.current + 1)
        elif key == "shift tab":
            self.switch(self.current - 1)
        elif key.isdigit() and 1 <= int(key) <= len(self.screens):
            self.switch(int(key) - 1)

    # --- dialogs ------------------------------------------------------------------------------

    def form(self, title: str, fields: list[tuple[str, str, str]], submit: Callable[[dict[str, str]], Any],
             secret: tuple[str, ...] = (), then: Callable[[Any], None] | None = None) -> None:
        """A form over the screen: (key, label, default) a field; Enter on the last field or F2 submits.

        With `then`, `submit(values)` is the blocking work (run on a worker
        thread) and the form stays open until it is done: a refusal is shown
        in the form, over the values as they were typed, to be corrected and
        sent again; `then(result)` runs once it was accepted and the form
        closed. Without `then`, the form closes and `submit` starts the work
        itself. A field named in `secret` is typed masked, and its value
        lives only in this process's memory on its way to the admin API.
        """
        edits: dict[str, urwid.Edit] = {}
        rows: list[Any] = [urwid.Text(("title", title)), urwid.Divider()]
        width = min(40, max(len(label) for _, label, _ in fields) + 2)  # every label on one line
        for key, label, default in fields:
            edit = urwid.Edit(mask="*" if key in secret else None, edit_text=default)
            edits[key] = edit
            rows.append(urwid.Columns([(width, urwid.Text(label)), urwid.AttrMap(edit, "field", "focus")]))
        refusal = urwid.Text("")
        rows += [urwid.Divider(), *([refusal] if then is not None else []),
                 urwid.Text(("dim", "Enter next field (on the last: done)  F2 done  Esc cancel"))]
        walker: urwid.SimpleFocusListWalker = urwid.SimpleFocusListWalker(rows)
        box = urwid.ListBox(walker)
        walker.set_focus(2)
        app = self
        sending = [False]

        def accepted(result: Any) -> None:
            sending[0] = False
            app.close_dialog()
            assert then is not None
            then(result)

        def refused(error: BaseException) -> None:
            # The person typed all of it once: a refusal keeps it, and says what to change.
            sending[0] = False
            refusal.set_text(("bad", sentence(error)))

        class Form(urwid.WidgetWrap):
            def keypress(self, size, key):
                if key == "esc":
                    app.close_dialog()
                    app.say("cancelled; nothing was changed")
                    return None
                if key == "enter" or key == "f2":
                    focus = walker.focus or 0
                    last = 2 + len(fields) - 1
                    if key == "enter" and focus < last:
                        walker.set_focus(focus + 1)
                        return None
                    values = {k: e.edit_text.strip() for k, e in edits.items()}
                    if then is not None:
                        if not sending[0]:
                            sending[0] = True
                            refusal.set_text(("dim", "sending…"))
                            app.work(lambda: submit(values), accepted, refused)
                        return None
                    app.close_dialog()
                    try:
                        submit(values)
                    except Exception as e:  # noqa: BLE001 - a form's refusal is a sentence, never a traceback
                        app.say(sentence(e), bad=True)
                    return None
                return super().keypress(size, key)

        # Room for the fields, and for a form that stays open, a refusal of up to three lines.
        self._open(Form(urwid.LineBox(box)), height=len(fields) + (10 if then is not None else 7))

    def message(self, title: str, rows: list[Any]) -> None:
        """A box of text over the screen, closed by any key."""
        app = self
        body = urwid.ListBox(urwid.SimpleFocusListWalker(
            [urwid.Text(("title", title)), urwid.Divider(), *lines(rows), urwid.Divider(),
             urwid.Text(("dim", "any key closes this"))]))

        class Box(urwid.WidgetWrap):
            def selectable(self):
                return True

            def keypress(self, size, key):
                app.close_dialog()
                return None

        self._open(Box(urwid.LineBox(body)), height=min(len(rows) + 7, 34))

    def _open(self, widget: urwid.Widget, height: int) -> None:
        self._dialog = True
        self.top.original_widget = urwid.Overlay(widget, self.frame, "center", ("relative", 90), "middle",
                                                 height)
        self.redraw()

    def close_dialog(self) -> None:
        self._dialog = False
        self.top.original_widget = self.frame
        self.redraw()
