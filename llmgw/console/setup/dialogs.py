"""The settings of one part, opened with Enter on its row: a dialog that explains the part and holds its fields.

Each dialog reads the Choices when it opens and writes them back when it is
kept (the Keep button or Esc), so a dialog closed half-typed leaves nothing
half-applied: what is shown on the parts list is what the install will do.
"""

from __future__ import annotations

from collections.abc import Callable

import urwid

from llmgw.onboard import PART, STARTERS, ChoiceError, Choices

OTHER_GGUF = "other"
# Every attribute a focusable row's markup may carry, mapped to the focus colours: urwid's AttrMap maps only the
# attributes it names, so a row written in "dim" or "" (the parts list) kept its own colours when focused and
# nobody could see where the cursor was.
FOCUS = {attr: "focus" for attr in (None, "", "dim", "ok", "warn", "fail", "title", "secret")}


class Dialog(urwid.WidgetWrap):
    """A framed Pile with Keep at its foot; Esc keeps too."""

    def __init__(self, title: str, body: list[urwid.Widget], keep: Callable[[], str], close: Callable[[], None],
                 button_label: str = "Keep"):
        self._keep, self._close = keep, close
        self.message = urwid.Text("")
        button = urwid.AttrMap(urwid.Button(button_label, on_press=lambda _b: self.done()), None, FOCUS)
        pile = urwid.Pile([*body, urwid.Divider(), urwid.AttrMap(self.message, "fail"),
                           urwid.Padding(button, width=10)])
        super().__init__(urwid.LineBox(urwid.Filler(pile, valign="top"), title=title))

    def done(self) -> None:
        wrong = self._keep()
        if wrong:
            self.message.set_text(wrong)
            return
        self._close()

    def keypress(self, size, key):
        if key == "esc":
            self.done()
            return None
        return super().keypress(size, key)


def _text(markup) -> urwid.Text:
    return urwid.Text(markup)


def _edit(caption: str, value: str, mask: str | None = None) -> urwid.Edit:
    return urwid.Edit(("dim", caption), value, mask=mask)


def focusable(w: urwid.Widget) -> urwid.Widget:
    """`w` drawn in reverse while it has the focus, whatever colours its own markup names."""
    return urwid.AttrMap(w, None, FOCUS)


def part_dialog(key: str, choices: Choices, close: Callable[[], None]) -> Dialog:
    """The part's settings; for a part that can be left out, with the switch that turns it on or off too."""
    part = PART[key]
    intro = [_text(("title", part.name)), _text(part.what + "."),
             *([_text(("dim", f"Without it: {part.without}."))] if part.without else []), urwid.Divider()]
    if not part.built:
        said = ("Not built yet in this version: it is left out of the install. docs/not-yet-built.md says what "
                "to do meanwhile." if part.missing == "not built yet" else
                f"This program has it, but setup does not place it yet: it is left out of the install; add it "
                f"once the cluster runs ({part.docs}).")
        return Dialog(part.name, [*intro, _text(("warn", said))], lambda: "", close)
    intro.append(_text(part.settings))
    intro.append(urwid.Divider())
    body, keep = _settings(key, choices, intro)
    if part.always:
        return Dialog(part.name, body, keep, close)
    # After the part's own fields, so the first of those keeps the focus when the dialog opens; for a part
    # with none (the firewall) the switch has it, and the message that sent the person here ("turn the
    # firewall off") can be done where it is read.
    switch = urwid.CheckBox(f"Install {part.name.lower()}", state=choices.is_on(key))

    def keep_with_switch() -> str:
        before = choices.on.get(key)
        choices.on[key] = switch.state
        wrong = keep()
        if not wrong:
            try:
                choices.check()
            except ChoiceError as e:
                if e.part == key:
                    wrong = str(e)
        if wrong:
            if before is None:
                choices.on.pop(key, None)
            else:
                choices.on[key] = before
        return wrong
    return Dialog(part.name, [*body, urwid.Divider(), focusable(switch)], keep_with_switch, close)


def _settings(key: str, choices: Choices, intro: list) -> tuple[list[urwid.Widget], Callable[[], str]]:
    """A part's own fields, and what keeps them: a sentence when a value cannot be kept, else ""."""
    if key == "control":
        return _control(choices, intro)
    if key == "starter":
        return _starter(choices, intro)
    if key == "all_three":
        vip = _edit("Floating address (ADDR/LEN, empty for none): ", choices.vip)

        def keep_vip() -> str:
            choices.vip = vip.edit_text.strip()
            return ""
        return [*intro, focusable(vip)], keep_vip
    if key == "notify":
        return _notify(choices, intro)
    if key == "judge":
        return _judge(choices, intro)
    if key == "bundle":
        path = _edit("The bundle's path: ", choices.bundle)
        digest = _edit("Its sha256: ", choices.bundle_sha256)

        def keep_bundle() -> str:
            choices.bundle, choices.bundle_sha256 = path.edit_text.strip(), digest.edit_text.strip()
            return ""  # checked with the switch, by the dialog (part_dialog's keep_with_switch)
        return [*intro, focusable(path), focusable(digest)], keep_bundle
    if key == "limits":
        ttl = _edit("Longest key lifetime (e.g. 90d; empty: no limit): ", choices.max_key_ttl)

        def keep_ttl() -> str:
            value = ttl.edit_text.strip()
            before = choices.max_key_ttl
            choices.max_key_ttl = value
            try:
                choices.check()
            except ChoiceError as e:
                if e.part == "limits":
                    choices.max_key_ttl = before
                    return str(e)
            return ""
        return [*intro, focusable(ttl)], keep_ttl
    return intro, lambda: ""


def _notify(choices: Choices, intro: list) -> tuple[list[urwid.Widget], Callable[[], str]]:
    url = _edit("Webhook's address: ", choices.webhook)
    group: list[urwid.RadioButton] = []
    shapes = {shape: urwid.RadioButton(group, label, state=(choices.webhook_format == shape))
              for shape, label in (("json", "JSON, one event a request"),
                                   ("slack", "A message for Slack, Mattermost or Rocket.Chat"))}
    private = urwid.CheckBox("It is on this machine (a loopback or link-local address), as meant",
                             state=choices.webhook_private)

    def keep() -> str:
        choices.webhook = url.edit_text.strip()
        choices.webhook_format = next(shape for shape, button in shapes.items() if button.state)
        choices.webhook_private = private.state
        return ""  # checked with the switch, by the dialog (part_dialog's keep_with_switch)
    return [*intro, focusable(url), *(focusable(b) for b in shapes.values()), focusable(private)], keep


def _judge(choices: Choices, intro: list) -> tuple[list[urwid.Widget], Callable[[], str]]:
    from llmgw.onboard import JUDGES

    group: list[urwid.RadioButton] = []
    chosen = choices.judge_key()
    buttons = {j.key: urwid.RadioButton(group, j.label, state=(chosen == j.key)) for j in JUDGES}
    copies = _edit("Copies (empty: one on one machine, two with three): ",
                   str(choices.judge_replicas) if choices.judge_replicas else "")
    room = choices.judge_room()
    said = [_text(("warn", f"It does not fit here: {room}."))] if room else []

    def keep() -> str:
        text = copies.edit_text.strip()
        if text and not text.isdigit():
            return f'"{text}" is not a number of copies; give one such as 2, or leave it empty.'
        choices.judge = next(k for k, b in buttons.items() if b.state)
        choices.judge_replicas = int(text) if text else 0
        return ""  # checked with the switch, by the dialog (part_dialog's keep_with_switch)
    return [*intro, *said, *(focusable(b) for b in buttons.values()), urwid.Divider(), focusable(copies)], keep


def _control(choices: Choices, intro: list) -> tuple[list[urwid.Widget], Callable[[], str]]:
    email = _edit("Administrator's e-mail: ", choices.admin_email)
    group: list[urwid.RadioButton] = []
    languages = {code: urwid.RadioButton(group, label, state=(choices.language == code))
                 for code, label in (("en", "English"), ("tr", "Türkçe"))}

    def keep() -> str:
        value = email.edit_text.strip()
        if "@" not in value or value.startswith("@") or value.endswith("@"):
            return f'"{value}" is not an e-mail address; give the first administrator\'s, such as admin@example.com.'
        choices.admin_email = value
        choices.language = next(code for code, b in languages.items() if b.state)
        return ""
    return [*intro, focusable(email), urwid.Divider(), _text("The portal's language:"),
            *(focusable(b) for b in languages.values())], keep


def _starter(choices: Choices, intro: list) -> tuple[list[urwid.Widget], Callable[[], str]]:
    group: list[urwid.RadioButton] = []
    known = {s.key for s in STARTERS}
    buttons = {}
    for s in STARTERS:
        repo = "/".join(s.source.removeprefix("hf:").split("/")[:2])
        label = s.label if s.engine == "sim" else f"{s.label:<14}{s.size:>7}  {repo}"
        buttons[s.key] = urwid.RadioButton(group, label, state=(choices.starter == s.key))
    buttons[OTHER_GGUF] = urwid.RadioButton(group, "Another GGUF on Hugging Face:",
                                            state=choices.starter not in known)
    other = _edit("  hf:", choices.starter[3:] if choices.starter.startswith("hf:") else "")
    context = _edit("Context (tokens): ", str(choices.starter_context))

    def keep() -> str:
        chosen = next(k for k, b in buttons.items() if b.state)
        value = "hf:" + other.edit_text.strip() if chosen == OTHER_GGUF else chosen
        try:
            tokens = int(context.edit_text.strip())
        except ValueError:
            return f'"{context.edit_text}" is not a number of tokens; give one such as 4096.'
        before = (choices.starter, choices.starter_context)
        choices.starter, choices.starter_context = value, tokens
        try:
            choices.check()
        except ChoiceError as e:
            if e.part == "starter":
                choices.starter, choices.starter_context = before
                return str(e)
        return ""
    return [*intro, *(focusable(b) for b in buttons.values()), focusable(other), urwid.Divider(),
            focusable(context)], keep


def message_dialog(title: str, sentence: str, close: Callable[[], None]) -> Dialog:
    return Dialog(title, [_text(sentence)], lambda: "", close, button_label="Close")
