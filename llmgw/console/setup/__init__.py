"""`sudo llmgw` on a bare machine (and `llmgw setup`): the screens that install the first control plane.

`run_setup(args)` takes the parsed command line of `llmgw setup` (or the
console's dispatcher's): --root, --services, the listeners and the first
administrator's e-mail. What the screens choose is installed by
llmgw.onboard.firstplane (one machine) or llmgw.onboard.hainstall (three),
which `llmgw server init --install [--ha]` runs too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from llmgw.onboard import LISTEN_DEFAULTS, Choices, Result


def choices_from(args) -> Choices:
    choices = Choices()
    choices.root = getattr(args, "root", None) or "/"
    choices.services = getattr(args, "services", None)
    for role in LISTEN_DEFAULTS:
        value = getattr(args, f"listen_{role}", None)
        if value:
            choices.listen[role] = value
    if getattr(args, "admin_email", None):
        choices.admin_email = args.admin_email
    return choices


def install_with(choices: Choices, report: Callable) -> Result:
    from pathlib import Path

    from llmgw.onboard import Layout, install, service_manager

    if choices.machines == 3:
        from llmgw.onboard import install_three

        return install_three(choices, report)
    layout = Layout(Path(choices.root))
    return install(choices, layout, service_manager(layout, choices.services), report)


def run_setup(args) -> int:
    from llmgw.console.setup.app import SetupApp

    if not sys.stdin.isatty() or not sys.stdout.isatty():
        print("llmgw: the setup screens need a terminal; from a script, run `llmgw server init --install` "
              "with the parts as flags (llmgw server init --help).", file=sys.stderr)
        return 2
    app = SetupApp(choices_from(args), install_with)
    status = app.run()
    result = app.result
    if result is not None:
        # After the screens close: what is not secret, for the terminal's scrollback.
        print(f"llmgw is installed. Portal: {result.portal}  client API: {result.client_api}")
    elif app.failed:
        print(f"llmgw: the install stopped: {app.failed}", file=sys.stderr)
    else:
        print("Nothing was installed.")
    return status
