"""The body a guard service is sent: a template the text is put into, checked when the config is read.

It is configuration's to check (a bad `body` is refused at start, naming the
key) and the guard's to fill at each call; it lives here, on the bottom floor,
so that config never imports guard (they imported each other; issue 12).
"""

from __future__ import annotations

import json
import re

from llmgw.config.loader import Invalid
from llmgw.errors import N_

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_JSON_TEXT = re.compile(r"\s*json\s+\.Text\s*")


def validate_body_template(body: str) -> None:
    """Refuse a body the gateway cannot fill: only `{{json .Text}}` is known, and what it makes
    must be JSON. Raises config.loader.Invalid naming `body`."""
    if not body:
        return
    for found in _PLACEHOLDER.finditer(body):
        if not _JSON_TEXT.fullmatch(found.group(1)):
            raise Invalid("body", N_('{group} is not something the gateway fills in; the one it knows is {{{{json '
                                     '.Text}}}}, the text as a JSON string'), params={"group": found.group(0)})
    rest = _PLACEHOLDER.sub("", body)
    if "{{" in rest or "}}" in rest:
        raise Invalid("body", N_("has a {{ or }} that does not make a {{json .Text}}"))
    try:
        json.loads(render_body(body, "the text"))
    except ValueError as e:
        raise Invalid("body", N_('is not JSON once {{{{json .Text}}}} is filled in ({e}); {{{{json .Text}}}} writes '
                                 'the quotes itself, so it goes in without them'), params={"e": e}) from None


def render_body(body: str, text: str) -> bytes:
    """The request for `text`: the template filled in, or {"input": text} when there is none."""
    literal = json.dumps(text, ensure_ascii=False)
    if not body:
        return ('{"input": ' + literal + "}").encode()
    return _PLACEHOLDER.sub(lambda m: literal, body).encode()
