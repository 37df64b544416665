"""The portal's password form, when auth.ldap is on: a directory login beside local e-mail and password.

The order keeps local accounts as they were: someone whose e-mail names an
account with a password of its own signs in with it; anyone else who types
into the form (`ada`, `CORP\\ada`, `ada@corp.example`) is checked against the
directory, and the account it vouches for (made, taken over by e-mail, or
found by the directory's id) gets the session. Both ways count failures
toward the same throttle (Sessions.sign_in_vouched).
"""

from __future__ import annotations

from llmgw.account import AccountError, Actor, SignedIn
from llmgw.auth import SUSPENDED, GroupMap
from llmgw.errors import N_
from llmgw.portal.web import Portal
from llmgw.store import Person

DEFAULT_LABEL = N_("directory")


def form_label(portal: Portal) -> str | None:
    """What the form's login field calls the directory ("E-mail or LABEL user name"); None without LDAP."""
    settings = portal.plane.settings.current.auth.ldap
    return (settings.label or DEFAULT_LABEL) if settings.enabled else None


async def _has_own_password(portal: Portal, login: str) -> bool:
    person = await portal.store.person_by_email(login) if "@" in login else None
    return person is not None and person.password_hash is not None


async def sign_in(portal: Portal, login: str, password: str, *, address: str, agent: str) -> SignedIn:
    """A session for the right login and password, from a local account's password or the directory."""
    settings = portal.plane.settings.current.auth.ldap
    if not settings.enabled or await _has_own_password(portal, login):
        signed: SignedIn = await portal.sessions.sign_in(login, password, address=address, agent=agent)
        return signed

    # Here, not at the top: ldap3 costs every control plane's start 75 ms, and most never turn LDAP on.
    from llmgw.auth import ldap

    async def vouched_person() -> Person:
        vouched = await ldap.sign_in(settings, portal.secrets, login, password)
        try:
            person: Person = await portal.directory.account(
                vouched, GroupMap.of(settings), create=settings.create_accounts,
                actor=Actor(vouched.email or vouched.subject, "ldap"))
        except AccountError as e:
            if e.code == SUSPENDED:
                # As a wrong password, and counted (sign_in_vouched counts a 401): a suspension told apart
                # from a wrong password confirms a guessed one.
                raise AccountError(ldap.WRONG, 401, "unauthorized") from None
            raise
        return person

    directory_signed: SignedIn = await portal.sessions.sign_in_vouched(login, vouched_person, address=address,
                                                                       agent=agent)
    return directory_signed
