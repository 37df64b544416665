"""The setup screens: one machine or three, the parts, the other machines, the checks, the plan, the install, the end.

Every screen keeps its keys on its footer. Letters are shortcuts only where
no field takes them, so a letter typed into an address stays in the address.
The install runs on a thread of its own; its Progress reaches the screen
through a pipe the main loop watches, so the screen stays live while a
model is fetched.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import urwid

from llmgw.console.setup.dialogs import FOCUS, focusable, message_dialog, part_dialog
from llmgw.onboard import PARTS, STEP_NAMES, ChoiceError, Choices, Result, command, plan
from llmgw.onboard import checks as checking

PALETTE = [
    ("title", "bold", ""),
    ("focus", "standout", ""),
    ("dim", "dark gray", ""),
    ("ok", "dark green", ""),
    ("warn", "yellow", ""),
    ("fail", "light red", ""),
    ("footer", "black", "light gray"),
    ("secret", "bold", ""),
]

MARK = {"ok": ("ok", " ok "), "warn": ("warn", "warn"), "fail": ("fail", "FAIL")}
STATE_MARK = {"doing": ("warn", " ..  "), "done": ("ok", " done"), "unchanged": ("dim", " same"),
              "failed": ("fail", "FAIL ")}


class PartRow(urwid.WidgetWrap):
    """A part on the list: Space turns it on or off, Enter opens its settings."""

    def __init__(self, app: SetupApp, key: str):
        self.app, self.key = app, key
        self.text = urwid.Text("")
        super().__init__(urwid.AttrMap(self.text, None, FOCUS))
        self.refresh()

    def selectable(self) -> bool:
        return True

    def refresh(self) -> None:
        c = self.app.choices
        part = next(p for p in PARTS if p.key == self.key)
        if not part.built:
            box, when = "[-]", part.missing
        elif part.always:
            box, when = "[*]", "always"
        else:
            box, when = ("[x]", "on") if c.is_on(self.key) else ("[ ]", "off")
            if self.key == "starter" and c.is_on(self.key):
                when = f"on: {c.starter_source()[0]}"
            elif self.key == "judge" and c.is_on(self.key):
                from llmgw.onboard import JUDGE

                when = f"on: {JUDGE[c.judge_key()].short}"
            elif self.key == "judge" and c.on.get("judge", c.default_on("judge")) and c.judge_room():
                when = "off: no room"
        line = f"{box} {part.name:<28}{when[:17]:<18}{part.what}"
        below = f"    {'':<28}{'':<18}without it: {part.without}" if part.without and not c.is_on(self.key) \
            and part.built else ""
        self.text.set_text([("dim" if not part.built else "", line), *([("dim", "\n" + below)] if below else [])])

    def keypress(self, size, key):
        if key == " ":
            said = self.app.choices.toggle(self.key)
            if said:
                self.app.say(said)
            self.refresh()
            return None
        if key == "enter":
            self.app.open_dialog(part_dialog(self.key, self.app.choices, self.app.close_dialog))
            return None
        return key


class SetupApp:
    def __init__(self, choices: Choices, install: Callable[[Choices, Callable], Result]):
        self.choices = choices
        self.install = install
        self.result: Result | None = None
        self.failed = ""
        self.loop: urwid.MainLoop | None = None
        self.header = urwid.AttrMap(urwid.Text(""), "title")
        self.footer = urwid.AttrMap(urwid.Text(""), "footer")
        self.status = urwid.Text("")
        # Any: the body is a list, or a dialog over one; urwid's generics would pin it to the first.
        self.frame: Any = urwid.Frame(urwid.SolidFill(" "), header=self.header, footer=urwid.Pile([self.status,
                                                                                            self.footer]))
        self.keys: dict[str, Callable[[], None]] = {}
        self.progress: queue.Queue = queue.Queue()
        self.progress_rows: dict[tuple[str, str], urwid.Text] = {}
        self.progress_walker: urwid.SimpleFocusListWalker | None = None
        self.part_rows: list[PartRow] = []
        # The part the parts list had in focus: back on that list (from a dialog, or from the checks with b),
        # the person is where they left it rather than at the top.
        self.focused_part = ""

    # -- the frame

    def show(self, title: str, body: list[Any], keys: dict[str, tuple[str, Callable[[], None]]]) -> None:
        self._remember_focus()
        self.header.original_widget.set_text(f" llmgw setup: {title}")
        self.keys = {k: fn for k, (_, fn) in keys.items()}
        self.footer.original_widget.set_text("  ".join(f"{k}: {what}" for k, (what, _) in keys.items()))
        self.status.set_text("")
        self.frame.body = urwid.ListBox(urwid.SimpleFocusListWalker(body))

    def say(self, sentence: str, attr: str = "warn") -> None:
        self.status.set_text((attr, sentence))

    def open_dialog(self, dialog: urwid.Widget, height: int | None = None) -> None:
        """Over the screen: a part's settings take most of it; a message (`height` lines) no more than it needs."""
        self.frame.body = urwid.Overlay(dialog, self.frame.body, align="center", width=("relative", 80),
                                        valign="middle", height=height or ("relative", 80), min_width=40,
                                        min_height=height or 12)

    def close_dialog(self) -> None:
        body = self.frame.body
        if isinstance(body, urwid.Overlay):
            self.frame.body = body.bottom_w
        for row in self._rows():
            row.refresh()

    def _rows(self) -> list[PartRow]:
        return self.part_rows

    def _parts_list(self) -> urwid.ListBox | None:
        body = self.frame.body
        if isinstance(body, urwid.Overlay):
            body = body.bottom_w
        return body if isinstance(body, urwid.ListBox) and any(r in cast(list, body.body) for r in self.part_rows) \
            else None

    def _remember_focus(self) -> None:
        listbox = self._parts_list()
        if listbox is not None and isinstance(listbox.focus, PartRow):
            self.focused_part = listbox.focus.key

    def _focus_part(self, key: str) -> None:
        """Put the parts list's focus on `key`'s row, if that row is on it."""
        listbox = self._parts_list()
        row = next((r for r in self.part_rows if r.key == key), None)
        if listbox is not None and row is not None:
            listbox.set_focus(cast(list, listbox.body).index(row))  # the walker is a list
            self.focused_part = key

    def unhandled(self, key) -> bool | None:
        if isinstance(key, str) and key in self.keys:
            self.keys[key]()
            return True
        return None

    def run(self) -> int:
        self.screen_machines()
        self.loop = urwid.MainLoop(self.frame, PALETTE, unhandled_input=self.unhandled, handle_mouse=False)
        self.pipe = self.loop.watch_pipe(self._drain)
        try:
            self.loop.run()
        except urwid.display.common.InputClosedError:
            # The terminal went away (an SSH session dropped): nothing to show anything on.
            return 1 if self.failed or self.result is None else 0
        if self.failed:
            return 1
        # Quitting before the install is a choice, not a failure.
        return 0

    def quit(self) -> None:
        raise urwid.ExitMainLoop()

    # -- the screens

    def screen_machines(self) -> None:
        group: list[urwid.RadioButton] = []
        one = urwid.RadioButton(group, "One machine: this one runs everything", state=self.choices.machines == 1)
        three = urwid.RadioButton(group, "Three machines: high availability, any one can be lost",
                                  state=self.choices.machines == 3)

        def next_() -> None:
            self.choices.machines = 3 if three.state else 1
            self.screen_parts()
        self.show("one machine or three", [
            urwid.Text("Nothing of llmgw is installed on this machine yet. These screens install it: a control "
                       "plane, and with it what you choose."),
            urwid.Divider(),
            urwid.Text(("title", "Is this one machine, or three for high availability?")),
            focusable(one), focusable(three), urwid.Divider(),
            urwid.Padding(focusable(urwid.Button("Next", on_press=lambda _b: next_())), width=10),
        ], {"n": ("next", next_), "q": ("quit", self.quit)})

    def screen_parts(self) -> None:
        rows = self.part_rows = [PartRow(self, p.key) for p in PARTS if self.choices.applies(p)]
        self.show("the parts of an install", [
            urwid.Text("Space turns a part on or off; Enter opens its settings, which say more."),
            urwid.Divider(), *rows,
        ], {"n": ("next: " + ("the other machines" if self.choices.machines == 3 else "the checks"),
                  self.parts_done),
            "b": ("back", self.screen_machines), "q": ("quit", self.quit)})
        self._focus_part(self.focused_part)

    def parts_done(self) -> None:
        try:
            self.choices.check()
        except ChoiceError as e:
            if e.part == "machines":
                self.screen_others()
                return
            # Closing the message opens the setting that is wrong.
            wrong = e.part
            self.open_dialog(message_dialog("This cannot go together", str(e), lambda: self._reopen(wrong)),
                             height=9)
            return
        if self.choices.machines == 3:
            self.screen_others()
        else:
            self.screen_checks()

    def _reopen(self, key: str) -> None:
        self.close_dialog()
        # The dialog is that part's: once it closes, the focus is on its row, where Space turns it off.
        self._focus_part(key)
        self.open_dialog(part_dialog(key, self.choices, self.close_dialog))

    def screen_others(self) -> None:
        from llmgw.onboard import MOST_JUDGE_MACHINES

        fields: list[urwid.Widget] = [urwid.Text("The other two machines, reached over SSH. Passwords are held in "
                                                 "memory for this run only."), urwid.Divider()]
        readers = []
        for i, m in enumerate(self.choices.others, start=2):
            address = urwid.Edit(("dim", "Address: "), m.address)
            user = urwid.Edit(("dim", "User: "), m.user)
            group: list[urwid.RadioButton] = []
            ways = {w: urwid.RadioButton(group, label, state=m.auth == w)
                    for w, label in (("key", "an SSH key"), ("agent", "the SSH agent"), ("password", "a password"))}
            key_path = urwid.Edit(("dim", "SSH key file: "), m.key_path)
            password = urwid.Edit(("dim", "Password: "), m.password, mask="*")
            sudo = urwid.Edit(("dim", "sudo password (if sudo asks): "), m.sudo_password, mask="*")
            inputs: list[Any] = [address, user, *ways.values(), key_path, password, sudo]
            fields += [urwid.Text(("title", f"Machine {i}")),
                       *(focusable(w) for w in inputs),
                       urwid.Divider()]
            readers.append((m, address, user, ways, key_path, password, sudo))
        given = [*self.choices.judge_nodes, "", ""]
        judges = [urwid.Edit(("dim", f"Judges' machine {i + 1}: "), given[i]) for i in range(MOST_JUDGE_MACHINES)]
        fields += [urwid.Text(("title", "Machines for the guardrails' judges alone (if any)")),
                   urwid.Text("Up to two, as USER@HOST[:PORT], logged in to as machine 2 is. Each becomes a node "
                              "that runs the judges and nothing else; left empty, the judges run on the three."),
                   *(focusable(j) for j in judges), urwid.Divider()]

        def keep() -> None:
            for m, address, user, ways, key_path, password, sudo in readers:
                m.address, m.user = address.edit_text.strip(), user.edit_text.strip() or "root"
                m.auth = next(w for w, b in ways.items() if b.state)
                m.key_path = key_path.edit_text.strip()
                m.password, m.sudo_password = password.edit_text, sudo.edit_text
            self.choices.judge_nodes = [j.edit_text.strip() for j in judges if j.edit_text.strip()]

        def next_() -> None:
            keep()
            try:
                self.choices.check()
            except ChoiceError as e:
                self.say(str(e), "fail")
                return
            self.screen_checks()

        def back() -> None:
            keep()
            self.screen_parts()
        fields.append(urwid.Columns([
            (10, focusable(urwid.Button("Back", on_press=lambda _b: back()))),
            (10, focusable(urwid.Button("Next", on_press=lambda _b: next_())))], dividechars=2))
        self.show("the other two machines", fields, {"f2": ("next", next_), "esc": ("back", back)})

    def screen_checks(self) -> None:
        found = checking.this_machine(self.choices.listen, Path(self.choices.root))
        if self.choices.machines == 3:
            from llmgw.onboard import check_others

            found += check_others(self.choices)
        lines: list[urwid.Widget] = [urwid.Text("Before anything is installed: system, room, clock, ports"
                                                + (", and whether the machines reach one another."
                                                   if self.choices.machines == 3 else ".")), urwid.Divider()]
        # As wide as the longest machine's name (user@host:port for the other two), and a space.
        width = max([15, *(len(c.machine) for c in found)]) + 1
        for c in found:
            attr, mark = MARK[c.state]
            lines.append(urwid.Text([(attr, f"[{mark}]"), f" {c.machine:<{width}}{c.name:<8}{c.sentence}"]))
        bad = checking.failed(found)
        lines += [urwid.Divider(), urwid.Text(
            ("fail", f"{len(bad)} check{'s' * (len(bad) != 1)} failed: fix {'them' if len(bad) > 1 else 'it'} "
                     "and check again.") if bad else ("ok", "Every check passed."))]
        keys = {"r": ("check again", self.screen_checks), "b": ("back", self.screen_parts),
                "q": ("quit", self.quit)}
        if not bad:
            keys = {"n": ("next: the plan", self.screen_plan), **keys}
        self.show("checks", lines, keys)

    def screen_plan(self) -> None:
        lines: list[urwid.Widget] = [urwid.Text("What will be installed, part by part, and what is left out."),
                                     urwid.Divider()]
        for line in plan(self.choices):
            lines.append(urwid.Text([("ok", " + ") if line.installed else ("dim", " - "), line.sentence]))
        lines += [urwid.Divider(), urwid.Text("The same install from a script:"),
                  urwid.Text(("title", "  " + command(self.choices)))]
        self.show("the plan", lines, {"i": ("install", self.start_install), "b": ("back", self.screen_parts),
                                      "q": ("quit", self.quit)})

    def start_install(self) -> None:
        self.progress_walker = urwid.SimpleFocusListWalker([urwid.Text("Installing. Each step says how it went."),
                                                            urwid.Divider()])
        self.progress_rows = {}
        self.header.original_widget.set_text(" llmgw setup: installing")
        self.keys = {}
        self.footer.original_widget.set_text("installing; the screen stays live")
        self.frame.body = urwid.ListBox(self.progress_walker)
        self.failed = ""
        threading.Thread(target=self._install, name="install", daemon=True).start()

    def _install(self) -> None:
        try:
            result = self.install(self.choices, self._report)
        except Exception as e:  # noqa: BLE001 - shown on the screen as the sentence the step said
            from llmgw.errors import explain

            self.progress.put(("failed", explain(e) or f"{type(e).__name__}: {e}"))
        else:
            self.progress.put(("finished", result))
        os.write(self.pipe, b".")

    def _report(self, progress) -> None:
        self.progress.put(("progress", progress))
        os.write(self.pipe, b".")

    def _drain(self, _data: bytes) -> bool:
        while True:
            try:
                kind, item = self.progress.get_nowait()
            except queue.Empty:
                return True
            if kind == "progress":
                self._show_progress(item)
            elif kind == "failed":
                self.failed = str(item)
                self.say(f"The install stopped: {item}", "fail")
                self.keys = {"r": self.start_install, "q": self.quit}
                self.footer.original_widget.set_text("r: run again (steps done are kept)  q: quit")
            else:
                self.result = item
                self.screen_end()

    def _show_progress(self, p) -> None:
        assert self.progress_walker is not None
        row = self.progress_rows.get((p.machine, p.step))
        if row is None:
            row = self.progress_rows[(p.machine, p.step)] = urwid.Text("")
            self.progress_walker.append(row)
            self.progress_walker.set_focus(len(self.progress_walker) - 1)
        attr, mark = STATE_MARK[p.state]
        said = p.sentence or f"{STEP_NAMES.get(p.step, p.step)}…"
        row.set_text([(attr, f"[{mark}]"), f" {p.machine:<14}{p.step:<10}{said}"])

    def screen_end(self) -> None:
        r = self.result
        c = self.choices
        assert r is not None
        if r.answer:
            heading = "llmgw is installed and answers."
        elif r.steps and set(r.steps.values()) == {"unchanged"}:
            heading = "llmgw was installed here already; nothing changed."
        else:
            heading = "llmgw is installed."
        lines: list[urwid.Widget] = [urwid.Text(("ok", heading)), urwid.Divider()]
        rows = [("portal", r.portal), ("client API", r.client_api), ("administrator", r.admin_email)]
        if r.password:
            rows.append(("password", r.password))
        else:
            rows.append(("password", f"set before; a new one: llmgw people reset-password {c.admin_email}"))
        if r.api_key:
            rows.append(("API key", r.api_key))
        if r.model:
            rows.append(("model", r.model + (f", which answered: {r.answer[:50]}" if r.answer else "")))
        if r.judge:
            rows.append(("judge", r.judge + (f": {r.judge_speed}" if r.judge_speed else "")))
        rows.append(("admin token", r.admin_token_file))
        if r.knowledge:
            rows.append(("knowledge bases", r.knowledge))
        for label, value in rows:
            lines.append(urwid.Text([("dim", f"  {label:<17}"), ("secret" if label in ("password", "API key")
                                                                  else "", value)]))
        lines += [urwid.Divider(),
                  urwid.Text("The password and the key are shown this once and kept nowhere: copy them now."),
                  urwid.Divider(), urwid.Text("The same install from a script:"),
                  urwid.Text(("title", "  " + command(c)))]
        self.show("installed", lines, {"q": ("quit", self.quit)})

