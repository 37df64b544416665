"""Sign-in with LDAP and Active Directory: find the person, check their password by their own bind, read groups.

The service account (`bind_dn`) finds the person by what they typed, in any
of the forms `ada`, `CORP\\ada` or `ada@corp.example`, matched against
sAMAccountName, uid, userPrincipalName and mail under `base_dn` and ANDed
with `user_filter`. Their password is checked by binding as them on a fresh
connection; it is never stored or logged. Their groups, nested ones
included, come from AD's LDAP_MATCHING_RULE_IN_CHAIN, or on other servers
from memberOf and group membership walked up to MAX_DEPTH levels; a group
is named to the GroupMap by its CN and by its whole DN, so either may be
mapped.

The account is tied to the directory's immutable id: objectGUID on AD,
entryUUID elsewhere, so a renamed person is the same account.

Disabled means: AD's userAccountControl ACCOUNTDISABLE bit; OpenLDAP's
ppolicy permanent lock (pwdAccountLockedTime 000001010000Z, how slapd's
administrators disable someone; a lock that times out after failed guesses
is not a suspension, or anyone could have a colleague suspended by guessing);
389-DS/Red Hat's nsAccountLock: TRUE; and anyone `user_filter` no longer admits.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import ldap3
from ldap3.core import exceptions as lx
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import parse_dn

from llmgw.account import AccountError
from llmgw.auth.directory import Vouched
from llmgw.auth.ldapconn import DirectoryError, _close, connect, is_active_directory, person_bind, service_bind
from llmgw.auth.secrets import SecretError, Secrets
from llmgw.auth.trial import Trial
from llmgw.config import LDAPSettings
from llmgw.errors import N_

log = logging.getLogger("llmgw.auth")

SOURCE = "ldap"
MAX_DEPTH = 8  # nested groups followed this many levels up; a loop in the groups ends here too
IN_CHAIN = "1.2.840.113556.1.4.1941"  # AD's LDAP_MATCHING_RULE_IN_CHAIN
PAGE = 500
IDS_PER_SEARCH = 50  # immutable ids ORed into one filter by the sync
_ACCOUNTDISABLE = 0x2
_PERMANENT_LOCK = "000001010000Z"
ATTRIBUTES = ["cn", "displayName", "mail", "userPrincipalName", "sAMAccountName", "uid", "memberOf",
              "objectGUID", "entryUUID", "userAccountControl", "pwdAccountLockedTime", "nsAccountLock"]
_GROUP_CLASSES = "(|(objectClass=group)(objectClass=groupOfNames)(objectClass=groupOfUniqueNames))"

WRONG = N_("that user name and password do not match a directory account here")
UNAVAILABLE = N_("the directory could not be reached to check your password; try again in a minute, or ask an "
                 "administrator")


@dataclass(frozen=True)
class Found:
    """One person as the directory shows them."""

    dn: str
    subject: str  # objectGUID or entryUUID, as a UUID's text
    email: str
    name: str
    disabled: bool

    def vouched(self, groups: frozenset[str] | None, *, trust_email: bool = False) -> Vouched:
        """`trust_email`: auth.ldap.trust_email, the administrator's word that people cannot write their own
        mail attribute, so a first sign-in may be tied to the existing account with it."""
        return Vouched(SOURCE, self.subject, self.email, self.name, groups, email_verified=trust_email)


def _text(attrs: dict[str, list[bytes]], name: str) -> list[str]:
    return [v.decode("utf-8", "replace") for v in attrs.get(name.lower(), [])]


def _first(attrs: dict[str, list[bytes]], *names: str) -> str:
    for name in names:
        for value in _text(attrs, name):
            if value.strip():
                return value.strip()
    return ""


def _subject(attrs: dict[str, list[bytes]]) -> str:
    guid = attrs.get("objectguid")
    if guid and len(guid[0]) == 16:
        return str(uuid.UUID(bytes_le=guid[0]))
    return _first(attrs, "entryUUID").lower()


def _disabled(attrs: dict[str, list[bytes]]) -> bool:
    uac = _first(attrs, "userAccountControl")
    if uac.lstrip("-").isdigit() and int(uac) & _ACCOUNTDISABLE:
        return True
    if _PERMANENT_LOCK in _text(attrs, "pwdAccountLockedTime"):
        return True
    return _first(attrs, "nsAccountLock").upper() == "TRUE"


def _found(entry: dict) -> Found | None:
    attrs = {k.lower(): list(v) for k, v in entry.get("raw_attributes", {}).items()}
    subject = _subject(attrs)
    if not subject:
        log.warning("the directory gives no objectGUID or entryUUID for %s, so it cannot be tied to an account",
                    entry.get("dn"))
        return None
    return Found(dn=entry["dn"], subject=subject, email=_first(attrs, "mail", "userPrincipalName"),
                 name=_first(attrs, "displayName", "cn"), disabled=_disabled(attrs))


def login_filter(login: str, domain: str) -> str | None:
    """The filter that finds `login` (ada, CORP\\ada, ada@corp.example), or None for one that cannot be ours."""
    login = login.strip()
    if not login or len(login) > 256 or any(not c.isprintable() for c in login):
        return None
    if "\\" in login:
        typed, _, login = login.partition("\\")
        if not login or (domain and typed.casefold() != domain.casefold()):
            return None
    value = escape_filter_chars(login)
    if "@" in login:
        return f"(|(userPrincipalName={value})(mail={value}))"
    return f"(|(sAMAccountName={value})(uid={value}))"


def _user_filter(settings: LDAPSettings) -> str:
    f = settings.user_filter.strip()
    if f and not f.startswith("("):
        f = f"({f})"
    return f"(objectClass=person){f}"


def group_base(settings: LDAPSettings) -> str:
    if settings.group_base_dn:
        return settings.group_base_dn
    dcs = [f"{a}={v}" for a, v, _ in parse_dn(settings.base_dn) if a.lower() == "dc"]
    return ",".join(dcs) or settings.base_dn


def _cn(dn: str) -> str | None:
    try:
        first = parse_dn(dn)[0]
    except (lx.LDAPInvalidDnError, IndexError):
        return None
    return first[1] if first[0].lower() == "cn" else None


class Reader:
    """The directory as the service account reads it, over one bound connection (synchronous)."""

    def __init__(self, settings: LDAPSettings, conn: ldap3.Connection, url: str):
        self.settings = settings
        self.conn = conn
        self.url = url
        self.ad = is_active_directory(conn)
        self._parents: dict[str, list[str]] = {}  # a group's DN → the groups it is in, for one sync

    def close(self) -> None:
        _close(self.conn)

    def _search(self, base: str, query: str, attributes: Sequence[str]) -> list[dict]:
        try:
            entries = self.conn.extend.standard.paged_search(base, query, ldap3.SUBTREE, attributes=list(attributes),
                                                            paged_size=PAGE, generator=False)
        except lx.LDAPNoSuchObjectResult:
            raise DirectoryError(N_("{dn} does not exist in the directory; check its spelling (OU=…,DC=…)"),
                                 kind="search", params={"dn": base}) from None
        except lx.LDAPInvalidFilterError:
            raise DirectoryError(N_("auth.ldap.user_filter {filter} is not an LDAP filter; write it like "
                                    "(memberOf=CN=llmgw-users,OU=Groups,DC=corp,DC=example)"),
                                 kind="search", params={"filter": self.settings.user_filter}) from None
        except (lx.LDAPException, OSError) as e:
            raise DirectoryError(N_("the directory did not answer a search under {dn} ({reason})"), kind="search",
                                 params={"dn": base, "reason": str(e)[:200]}) from None
        return [e for e in entries if e.get("type") == "searchResEntry"]

    def find(self, login: str) -> list[Found]:
        match = login_filter(login, self.settings.domain)
        if match is None:
            return []
        entries = self._search(self.settings.base_dn, f"(&{_user_filter(self.settings)}{match})", ATTRIBUTES)
        return [f for f in map(_found, entries) if f is not None]

    def count(self) -> int:
        return len(self._search(self.settings.base_dn, f"(&{_user_filter(self.settings)})", ["1.1"]))

    def by_subjects(self, subjects: Sequence[str]) -> dict[str, Found]:
        """Those of `subjects` the directory still has and user_filter still admits, one search per IDS_PER_SEARCH."""
        found: dict[str, Found] = {}
        for i in range(0, len(subjects), IDS_PER_SEARCH):
            ids = "".join(self._id_filter(s) for s in subjects[i:i + IDS_PER_SEARCH])
            if not ids:
                continue
            for entry in self._search(self.settings.base_dn, f"(&{_user_filter(self.settings)}(|{ids}))",
                                      ATTRIBUTES):
                f = _found(entry)
                if f is not None:
                    found[f.subject] = f
        return found

    def _id_filter(self, subject: str) -> str:
        try:
            u = uuid.UUID(subject)
        except ValueError:
            return ""
        if self.ad:
            return "(objectGUID=" + "".join(f"\\{b:02x}" for b in u.bytes_le) + ")"
        return f"(entryUUID={u})"

    def groups(self, person: Found) -> frozenset[str]:
        """Every group `person` is in, nested included, by DN and by CN."""
        if self.ad:
            query = f"(&(objectClass=group)(member:{IN_CHAIN}:={escape_filter_chars(person.dn)}))"
            dns = [e["dn"] for e in self._search(group_base(self.settings), query, ["1.1"])]
        else:
            dns = self._walk(person.dn)
        names: set[str] = set()
        for dn in dns:
            names.add(dn)
            cn = _cn(dn)
            if cn:
                names.add(cn)
        return frozenset(names)

    def _walk(self, dn: str) -> list[str]:
        """Groups up the chain from `dn`, breadth first, each read once, at most MAX_DEPTH levels."""
        seen: list[str] = []
        level = [dn]
        for _ in range(MAX_DEPTH):
            above: list[str] = []
            for member in level:
                for group in self._groups_of(member):
                    if group.lower() not in {s.lower() for s in seen}:
                        seen.append(group)
                        above.append(group)
            if not above:
                return seen
            level = above
        log.warning("%s's groups nest deeper than %d levels; those above are not counted", dn, MAX_DEPTH)
        return seen

    def _groups_of(self, dn: str) -> list[str]:
        key = dn.lower()
        if key not in self._parents:
            value = escape_filter_chars(dn)
            query = f"(&{_GROUP_CLASSES}(|(member={value})(uniqueMember={value})))"
            self._parents[key] = [e["dn"] for e in self._search(group_base(self.settings), query, ["1.1"])]
        return self._parents[key]


def open_reader(settings: LDAPSettings, bind_password: str) -> Reader:
    """A Reader on the first server that answers with TLS and takes the service account's bind."""
    last: DirectoryError | None = None
    for url in settings.urls:
        try:
            conn = connect(settings, url)
        except DirectoryError as e:
            log.warning("LDAP: %s", e)
            last = e
            continue
        try:
            service_bind(conn, settings, bind_password)
        except DirectoryError:
            _close(conn)
            raise
        return Reader(settings, conn, url)
    raise last or DirectoryError(N_("auth.ldap.urls names no server"), kind="reach")


async def bind_password(settings: LDAPSettings, secrets: Secrets) -> str:
    if not settings.bind_dn:
        return ""
    return await secrets.read(settings.bind_password_file, "auth.ldap.bind_password_file")


def _limit(settings: LDAPSettings) -> float:
    # Each server's connect, then a handful of round trips, each within settings.timeout.
    return float(settings.timeout) * (len(settings.urls) + 8)


# --- signing in ---------------------------------------------------------------------------------


def _sign_in(settings: LDAPSettings, service_password: str, login: str, password: str) -> Vouched:
    reader = open_reader(settings, service_password)
    try:
        found = reader.find(login)
        if len(found) != 1:
            if len(found) > 1:
                log.warning("LDAP: %s matches %d people under %s; none signed in", login, len(found),
                            settings.base_dn)
            raise AccountError(WRONG, 401, "unauthorized")
        person = found[0]
        # Checked before the bind too: a directory that still takes a disabled person's bind says no here.
        if person.disabled or not person_bind(settings, reader.url, person.dn, password):
            raise AccountError(WRONG, 401, "unauthorized")
        return person.vouched(reader.groups(person), trust_email=settings.trust_email)
    finally:
        reader.close()


async def sign_in(settings: LDAPSettings, secrets: Secrets, login: str, password: str) -> Vouched:
    """What the directory vouches for `login` with `password`.

    AccountError 401 with one sentence for an unknown login and a wrong
    password alike (no one learns who is in the directory); 503 when no
    server answers or the service account cannot bind (the cause is logged
    for the administrator, not shown to the person)."""
    if not password or login_filter(login, settings.domain) is None:
        raise AccountError(WRONG, 401, "unauthorized")
    try:
        service_password = await bind_password(settings, secrets)
        return await asyncio.wait_for(asyncio.to_thread(_sign_in, settings, service_password, login, password),
                                      _limit(settings))
    except (DirectoryError, SecretError) as e:
        log.error("LDAP sign-in could not be checked: %s", e)
        raise AccountError(UNAVAILABLE, 503, "unavailable") from None
    except TimeoutError:
        log.error("LDAP sign-in took longer than %g s", _limit(settings))
        raise AccountError(UNAVAILABLE, 503, "unavailable") from None


# --- the sync's reading -------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """A tied person as the directory shows them now: None when gone (or no longer admitted)."""

    found: Found | None
    groups: frozenset[str] | None


def _look_up(settings: LDAPSettings, service_password: str, subjects: Sequence[str]) -> dict[str, Seen]:
    reader = open_reader(settings, service_password)
    try:
        found = reader.by_subjects(list(subjects))
        return {s: Seen(found[s], None if found[s].disabled else reader.groups(found[s])) if s in found
                else Seen(None, None) for s in subjects}
    finally:
        reader.close()


async def look_up(settings: LDAPSettings, secrets: Secrets, subjects: Iterable[str]) -> dict[str, Seen]:
    """Each subject as the directory shows it now. Raises DirectoryError (or SecretError) when it cannot
    be read whole: the sync then changes nothing, rather than take an unreadable directory for an empty one."""
    service_password = await bind_password(settings, secrets)
    try:
        return await asyncio.wait_for(asyncio.to_thread(_look_up, settings, service_password, list(subjects)),
                                      _limit(settings) * 4)
    except TimeoutError:
        raise DirectoryError(N_("the directory did not finish answering within {seconds} s"), kind="search",
                             params={"seconds": f"{_limit(settings) * 4:g}"}) from None


# --- trying the settings ------------------------------------------------------------------------


def _trial(settings: LDAPSettings, service_password: str, login: str) -> Trial:
    trial = Trial()
    _steps(settings, service_password, login, trial)
    return trial


def _steps(settings: LDAPSettings, service_password: str, login: str, trial: Trial) -> None:
    reached: list[str] = []
    for url in settings.urls:
        try:
            _close(connect(settings, url))
        except DirectoryError as e:
            trial.failed(f"reach {url}", str(e))
            continue
        reached.append(url)
        trial.passed(f"reach {url}", N_("TLS in force and the certificate checked").format())
    if not reached:
        return
    step = "bind as the service account"
    try:
        conn = connect(settings, reached[0])
    except DirectoryError as e:
        trial.failed(step, str(e))
        return
    try:
        service_bind(conn, settings, service_password)
    except DirectoryError as e:
        _close(conn)
        trial.failed(step, str(e))
        return
    reader = Reader(settings, conn, reached[0])
    try:
        trial.passed(step, N_("bound as {dn} on {url}{kind}").format(
            dn=settings.bind_dn or "(anonymous)", url=reached[0], kind=" (Active Directory)" if reader.ad else ""))
        _trial_people(settings, reader, login, trial)
    finally:
        reader.close()


def _trial_people(settings: LDAPSettings, reader: Reader, login: str, trial: Trial) -> None:
    step = "people under base_dn"
    try:
        n = reader.count()
    except DirectoryError as e:
        trial.failed(step, str(e))
        return
    if n == 0:
        trial.failed(step, (N_("nobody under {base} matches auth.ldap.user_filter {filter}; loosen the filter, "
                               "or check the group it names") if settings.user_filter else
                            N_("nobody under {base} is a person the service account can see; check base_dn and "
                               "what the service account may read")).format(base=settings.base_dn,
                                                                            filter=settings.user_filter))
        return
    trial.passed(step, N_("{n} people under {base} may sign in").format(n=n, base=settings.base_dn))
    if not login:
        return
    step = f"find {login}"
    if login_filter(login, settings.domain) is None:
        trial.failed(step, N_("{login} is not a user name this directory takes: write ada, {domain}\\ada or "
                              "ada@corp.example").format(login=login, domain=settings.domain or "CORP"))
        return
    try:
        found = reader.find(login)
    except DirectoryError as e:
        trial.failed(step, str(e))
        return
    if len(found) != 1:
        trial.failed(step, (N_("{login} matches {n} people; sAMAccountName, uid, userPrincipalName and mail must "
                               "each name one person") if found else
                            N_("{login} is not a person under {base} that auth.ldap.user_filter admits")).format(
            login=login, n=len(found), base=settings.base_dn))
        return
    person = found[0]
    if person.disabled:
        trial.failed(step, N_("{dn} is disabled in the directory").format(dn=person.dn))
        return
    trial.passed(step, N_("{dn}: {email}, id {subject}").format(dn=person.dn, email=person.email or "(no e-mail)",
                                                                subject=person.subject))
    try:
        groups = reader.groups(person)
    except DirectoryError as e:
        trial.failed(f"groups of {login}", str(e))
        return
    names = sorted(g for g in groups if "=" not in g) or sorted(groups)
    trial.passed(f"groups of {login}", ", ".join(names) if names else N_("in no group").format())


async def trial(settings: LDAPSettings, secrets: Secrets, *, login: str = "") -> Trial:
    """Each step of reaching the directory, binding, finding people and (with `login`) one person's groups."""
    result = Trial()
    if not settings.urls:
        result.failed("settings", N_("auth.ldap.urls names no server").format())
        return result
    try:
        service_password = await bind_password(settings, secrets)
    except SecretError as e:
        result.failed("read the service account's password", str(e))
        return result
    try:
        # The steps are made on the thread and handed back whole: one that runs past the limit adds none here.
        return await asyncio.wait_for(asyncio.to_thread(_trial, settings, service_password, login),
                                      _limit(settings) * 2)
    except TimeoutError:
        result.failed("answer in time", N_("the directory did not finish answering within {seconds} s").format(
            seconds=f"{_limit(settings) * 2:g}"))
    return result
