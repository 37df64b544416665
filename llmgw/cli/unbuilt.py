"""Commands the design names that are not built yet: each says so in one sentence and exits 2.

systemd/llmgw-mirror.service ran `llmgw mirror serve` and the Strata engine
launched `llmgw strata-serve` while neither existed, so a user met argparse's
"invalid choice" from a unit restarting every two seconds (issue 11). A
command that says what is missing, and where the docs say what to do
instead, is honest until the real one lands; then its entry here goes.
"""

from __future__ import annotations

import argparse
import sys

# command -> (what it would be, what to do meanwhile)
UNBUILT = {
    "strata-serve": ("the server of Strata models the agent starts",
                     "serve the model with the llamacpp engine"),
}


def sentence(command: str) -> str:
    what, meanwhile = UNBUILT[command]
    return f"llmgw {command} is not built yet: {what} is planned, not shipped; {meanwhile} (docs/not-yet-built.md)"


def register(commands) -> None:
    for command, (what, _) in UNBUILT.items():
        # Any arguments, options included: the unit and the engine pass theirs, and
        # the answer is the same; so no character starts an option here.
        p = commands.add_parser(command, help=f"not built yet: {what} (docs/not-yet-built.md)",
                                description=sentence(command), prefix_chars="\0", add_help=False)
        p.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
        p.set_defaults(run=lambda args, command=command: _refuse(command))


def _refuse(command: str) -> int:
    print(f"llmgw: {sentence(command)}", file=sys.stderr)
    return 2
