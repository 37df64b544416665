"""Sign-in (People → Sign-in in the Go original): single sign-on, the directory and provisioning.

Each way in is set up in a form and tried from the control plane before it
is kept: the form's Done is AdminClient.auth_keep, which runs the trial and
writes the block only when every step passes. A failed trial shows its
steps and keeps nothing; the password or client secret typed for it was
put in the store under a name of its own for the trial, and is taken out
again. The same calls as `llmgw ctl auth test | keep | off | scim-token`.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

import urwid

from llmgw.config import STORE_SECRET_PREFIX
from llmgw.console.ui import App, text_list
from llmgw.control import AdminClient, AdminError

KIND_TITLE = {"oidc": "single sign-on (OIDC)", "ldap": "directory (LDAP, Active Directory)",
              "scim": "provisioning (SCIM)"}


def trial_rows(trial: dict[str, Any]) -> list[Any]:
    """A trial's steps as `llmgw ctl auth test` prints them."""
    rows: list[Any] = [[("good", "  ok    ") if s["ok"] else ("bad", "  FAIL  "), f"{s['name']}: {s['detail']}"]
                       for s in trial["steps"]]
    if trial["ok"]:
        rows.append(("good", "every step passed"))
    else:
        failed = next((s["name"] for s in trial["steps"] if not s["ok"]), "")
        rows.append(("bad", f'the trial failed at "{failed}"; the steps after it were not tried' if failed
                     else "the trial tried nothing"))
    return rows


class SignIn:
    title = "Sign-in"
    command = "llmgw ctl auth; llmgw ctl auth test|keep|off oidc|ldap; llmgw ctl auth scim-token"
    keys = "e single sign-on  d directory  t try ldap  o try oidc  p SCIM token  x turn ldap off"

    def __init__(self, client: AdminClient) -> None:
        self.client = client

    def load(self) -> dict[str, Any]:
        return self.client.auth()

    def show(self, status: dict[str, Any]) -> urwid.Widget:
        return text_list(signin_rows(status))

    def keypress(self, app: App, key: str) -> bool:
        if key == "d":
            app.form("Directory (LDAP, Active Directory): tried before it is kept", [
                ("urls", "servers (ldaps://…)", ""), ("base_dn", "where people are", ""),
                ("bind_dn", "service account", ""), ("password", "its password", ""),
                ("ca_file", "CA (PEM file here)", ""), ("domain", "domain (CORP)", ""),
                ("login", "a login to look up", "")],
                lambda v: self._keep(app, "ldap", v), secret=("password",))
        elif key == "e":
            app.form("Single sign-on (OIDC, Entra ID): tried before it is kept", [
                ("issuer", "issuer URL", ""), ("client_id", "client ID", ""),
                ("password", "client secret", ""), ("admins", "administrators' group", "")],
                lambda v: self._keep(app, "oidc", v), secret=("password",))
        elif key in ("t", "o"):
            kind = "ldap" if key == "t" else "oidc"
            app.say(f"trying the {KIND_TITLE[kind]} settings in force…")
            app.work(lambda: self.client.auth_test(kind),
                     lambda trial: app.message(f"Trial of the {KIND_TITLE[kind]} in force", trial_rows(trial)))
        elif key == "p":
            app.work(self.client.scim_token, lambda token: app.message("A SCIM token, shown once", [
                token, "", "Give it to the identity provider as the secret token, with the tenant URL "
                           "https://GATEWAY/scim/v2. Making another ends this one."]))
        elif key == "x":
            def off(answer: dict[str, Any]) -> None:
                app.say(f"auth.ldap is off (settings version {answer['version']}); the accounts it made stay")
                app.refresh()

            app.work(lambda: self.client.auth_off("ldap"), off)
        else:
            return False
        return True

    def _keep(self, app: App, kind: str, values: dict[str, str]) -> None:
        app.say(f"trying the {KIND_TITLE[kind]} from the control plane…")

        def keep() -> dict[str, Any]:
            block = (ldap_block if kind == "ldap" else oidc_block)(values)
            secret_name = ""
            if values.get("password"):
                # A name of its own: a failed trial must not change the secret the settings in force name.
                secret_name = f"{kind}-{secrets.token_hex(4)}"
                block["bind_password_file" if kind == "ldap" else "client_secret_file"] = (
                    self.client.auth_secret_put(secret_name, values["password"]))
            before = self.client.auth()[kind].get("secret") or "" if secret_name else ""
            try:
                answer = self.client.auth_keep(kind, block, login=values.get("login", ""))
                if before.startswith(f"{STORE_SECRET_PREFIX}{kind}-") and answer.get("kept"):
                    # The one a console trial made for the settings now replaced: nothing names it any more.
                    self.client.auth_secret_delete(before[len(STORE_SECRET_PREFIX):])
                return answer
            except AdminError as e:
                if secret_name:
                    self.client.auth_secret_delete(secret_name)
                if e.code == "trial_failed":
                    return e.answer
                raise

        def done(answer: dict[str, Any]) -> None:
            kept = answer.get("kept")
            verdict = (("good", f"kept: auth.{kind} is in force, settings version {answer['version']}") if kept
                       else ("bad", f"nothing was kept: auth.{kind} is as it was"))
            app.message(f"Trial of the {KIND_TITLE[kind]}", [*trial_rows(answer["trial"]), "", verdict])
            app.say(verdict[1], bad=not kept)
            app.refresh()

        app.work(keep, done)


def ldap_block(values: dict[str, str]) -> dict[str, Any]:
    block: dict[str, Any] = {"urls": [u.strip() for u in values.get("urls", "").replace(",", " ").split()],
                             "base_dn": values.get("base_dn", ""), "bind_dn": values.get("bind_dn", "")}
    if values.get("domain"):
        block["domain"] = values["domain"]
    if values.get("ca_file"):
        path = os.path.expanduser(values["ca_file"])
        try:
            with open(path, encoding="utf-8") as f:
                block["ca"] = f.read()  # into the settings: every control plane has it, no file to copy
        except OSError as e:
            raise AdminError(f"the CA file {path} cannot be read ({(e.strerror or str(e)).lower()}); give the "
                             "path of the domain's CA certificate as a PEM file on this machine") from None
    return block


def oidc_block(values: dict[str, str]) -> dict[str, Any]:
    block: dict[str, Any] = {"issuer": values.get("issuer", ""), "client_id": values.get("client_id", "")}
    if values.get("admins"):
        block["roles"] = {"admin": [values["admins"]]}
    return block


def signin_rows(status: dict[str, Any]) -> list[Any]:
    oidc, ldap, scim = status["oidc"], status["ldap"], status["scim"]

    def state(on: bool) -> tuple[str, str]:
        return ("good", "on ") if on else ("dim", "off")

    sync = ldap.get("last_sync")
    sync_text = "not yet" if not sync else (
        f"REFUSED: {sync['refused']}" if sync.get("refused") else
        f"{sync.get('checked', 0)} checked, {len(sync.get('suspended') or [])} suspended, "
        f"{len(sync.get('reinstated') or [])} reinstated")
    token = {"file": "from auth.scim.token_file", "made": "made", "none": "none yet (p makes one)"}[scim["token"]]
    return [
        ["passwords        ", state(status["passwords"]["on"]),
         "" if status["passwords"]["on"] else f"  only {status['passwords']['break_glass']} keeps one"],
        ["single sign-on   ", state(oidc["on"]),
         f"  {oidc['issuer']} (client {oidc['client_id']})" if oidc["on"] else "  e sets it up"],
        ["directory        ", state(ldap["on"]),
         f"  {', '.join(ldap['urls'])} under {ldap['base_dn']}" if ldap["on"] else "  d sets it up"],
        ["  last sync      ", sync_text if ldap["on"] else "-"],
        ["provisioning     ", state(scim["on"]), f"  /scim/v2, token {token}"],
        "",
        f"accounts tied: {', '.join(f'{k} {v}' for k, v in status['accounts'].items())}",
        f"kept secrets: {', '.join(status['secrets']) or 'none'} (names only; a value is never shown)",
        "",
        ("dim", "Each way in is tried from the control plane before it is kept; a failed trial shows its steps "
                "and keeps nothing. docs/sign-in.md says what each step checks."),
    ]
