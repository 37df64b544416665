"""The frame every portal page stands in: who is reading, what they may see, and how a page answers.

A page is an async function `handler(request, viewer)` registered with
`@page(path, ...)` in a module named `*_pages.py` under llmgw/portal (or any
module of llmgw/portal/admin/), which `mount` imports. `page` leaves the
function as it is; `mount` wraps it, so that before it runs:

- the session cookie is read (`viewer` is None only on a `public` page);
- someone signed out is sent to /signin?next=<this path>;
- a role below the page's gets the 403 page (admin > operator > member);
- a POST (any method but GET/HEAD) must carry the CSRF value, as the form
  field `_csrf` (`{{ csrf_field() }}`) or the X-CSRF-Token header, and
  an Origin, when the browser sends one, of this site; else 403;
- the reader's language is chosen (i18n.choose).

and after it every answer carries the security headers (security.py). An
ExpectedError the handler raises becomes the error page, in the reader's
language. Nothing here is a middleware: /v1 never runs any of it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

import jinja2
from aiohttp import web
from markupsafe import Markup
from multidict import MultiDict, MultiDictProxy

from llmgw.account import CLUSTER, Accounts, Actor, People, Scope, Sessions, scope_of
from llmgw.accounting import UsageReports
from llmgw.auth import DirectoryAccounts, OIDCClient, Secrets
from llmgw.control import Refusal, SettingsError
from llmgw.errors import N_, ExpectedError
from llmgw.portal import i18n, security
from llmgw.store import (
    AuditStore,
    CatalogStore,
    Conflict,
    KeysStore,
    PeopleStore,
    Person,
    Session,
    SignInStore,
    StoreError,
    UsageStore,
)

if TYPE_CHECKING:
    from llmgw.control import Catalog
    from llmgw.kb import KnowledgeBases
    from llmgw.portal.plane import McpServers, PortalPlane

log = logging.getLogger("llmgw.portal")

ROLE_RANK = {"member": 1, "operator": 2, "admin": 3}
VIEWER = web.RequestKey["Viewer | None"]("viewer")  # None: signed out, on a public page
LANG = web.RequestKey("lang", str)
NONCE = web.RequestKey("nonce", str)
PRE_CSRF = web.RequestKey("pre_csrf", str)  # the browser's llmgw_csrf cookie, or the one this answer sets
NEW_PRE_CSRF = web.RequestKey("new_pre_csrf", bool)
# The form as request.post() reads it: text, or bytes and files for a multipart body.
FORM = web.RequestKey[MultiDictProxy[str | bytes | bytearray | web.FileField]]("form")
NAV_ORDER = ("/chat", "/images", "/workflows", "/keys", "/usage", "/connect", "/admin/people", "/admin/tree",
             "/admin/keys", "/admin/models", "/admin/nodes", "/admin/mirror", "/admin/guardrails", "/admin/mcp",
             "/admin/usage", "/admin/audit", "/admin/sign-in", "/admin/settings")
MAY_WAIT_FOR_PASSWORD = ("/profile", "/signout", "/signin")  # pages open while a password must be changed
NOTICE_MAX = 400  # characters: a notice is one sentence, and a cookie is small

Handler = Callable[[web.Request, "Viewer | None"], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Viewer:
    """The person reading the page, their session, and the values their pages embed."""

    person: Person
    session: Session
    csrf: str  # the form's _csrf and fetch's X-CSRF-Token
    chat_token: str  # the chat page's credential for /v1 (docs/portal.md); never in a URL or a log
    lang: str
    # What they administer (llmgw.account.scope): the cluster for an admin, their orgs and teams for a tenant
    # administrator, None for everyone else.
    scope: Scope | None = None

    @property
    def role(self) -> str:
        return self.person.role

    def may(self, role: str) -> bool:
        """Whether this person's role is `role` or above it."""
        return ROLE_RANK.get(self.person.role, 0) >= ROLE_RANK.get(role, 99)

    def may_open(self, role: str | None, tenants: bool) -> bool:
        """Whether a page (or a nav entry) for `role`, open to tenant administrators when `tenants`, is theirs."""
        return role is None or self.may(role) or (tenants and self.scope is not None)

    @property
    def within(self) -> Scope:
        """The scope a tenants' page passes its services; only such a page's handler asks, after may_open."""
        if self.scope is None:
            raise web.HTTPForbidden(text="this page is for administrators")
        return self.scope

    @property
    def tenant(self) -> bool:
        """A tenant administrator, not the cluster's: their pages hide what only the cluster's may do."""
        return self.scope is not None and self.scope.tenant

    def actor(self) -> Actor:
        return Actor(self.person.email, "portal")


@dataclass(frozen=True)
class Page:
    path: str
    handler: Handler
    methods: tuple[str, ...] = ("GET",)
    role: str | None = "member"
    public: bool = False
    tenants: bool = False  # open to tenant administrators too, each handler passing viewer.within to its services


@dataclass(frozen=True)
class NavItem:
    section: str  # "main" along the top; "admin" in the admin row
    path: str
    label: str  # an N_() msgid, translated as the nav is drawn
    role: str
    tenants: bool = False


@dataclass
class Registry:
    """The pages and nav entries that `mount` puts on an app."""

    pages: list[Page] = field(default_factory=list)
    nav: list[NavItem] = field(default_factory=list)

    def page(self, path: str, *, methods: Sequence[str] = ("GET",), role: str | None = "member",
             public: bool = False, tenants: bool = False) -> Callable[[Handler], Handler]:
        if role is not None and role not in ROLE_RANK:
            raise ValueError(f"{path}: role {role!r} is not one of {', '.join(ROLE_RANK)}")

        def register(handler: Handler) -> Handler:
            self.pages.append(Page(path, handler, tuple(m.upper() for m in methods), role, public, tenants))
            return handler

        return register

    def add_nav(self, section: str, path: str, label: str, role: str, tenants: bool = False) -> None:
        if role not in ROLE_RANK:
            raise ValueError(f"nav {path}: role {role!r} is not one of {', '.join(ROLE_RANK)}")
        if all(item.path != path for item in self.nav):
            self.nav.append(NavItem(section, path, label, role, tenants))
            # The order people expect, whichever module was imported first; others after, as added.
            known = {p: i for i, p in enumerate(NAV_ORDER)}
            self.nav.sort(key=lambda item: known.get(item.path, len(known)))

    def copy(self) -> Registry:
        return Registry(list(self.pages), list(self.nav))


# Filled as the page modules are imported, which `mount` does once; read-only after.
PAGES = Registry()


def page(path: str, *, methods: Sequence[str] = ("GET",), role: str | None = "member",
         public: bool = False, tenants: bool = False) -> Callable[[Handler], Handler]:
    """Registers a page: `@page("/keys", methods=("GET", "POST"))`. role=None: anyone signed in;
    tenants=True: tenant administrators too (llmgw.account.scope), the handler keeping to viewer.within."""
    return PAGES.page(path, methods=methods, role=role, public=public, tenants=tenants)


def add_nav(section: str, path: str, label: str, role: str, tenants: bool = False) -> None:
    """A link in the nav, shown to `role` and above (and tenant administrators when `tenants`):
    add_nav("main", "/keys", N_("Keys"), "member")."""
    PAGES.add_nav(section, path, label, role, tenants)


class _Store(KeysStore, PeopleStore, SignInStore, UsageStore, AuditStore, CatalogStore, Protocol):
    """What the portal's pages call themselves (its services take theirs from the plane's store):
    the tree and keys, people and sessions, single sign-on's states, usage, the audit, and the
    catalog a page's own Catalog is made over where the plane has none."""


@dataclass
class Portal:
    """What the pages use, built once per client app by `mount`."""

    plane: PortalPlane  # the ControlPlane or a Worker
    store: _Store
    accounts: Accounts
    people: People
    sessions: Sessions
    reports: UsageReports
    secrets: Secrets  # sign-in's sealed secrets (OIDC client, LDAP bind), read with this machine's master key
    directory: DirectoryAccounts  # accounts OIDC, LDAP and SCIM vouch for
    knowledge: KnowledgeBases  # /admin/kb's and /knowledge's: the service `ctl kb` calls
    env: jinja2.Environment
    registry: Registry
    static: dict[str, tuple[str, bytes, str]] = field(default_factory=dict)  # name -> (digest, body, type)
    oidc: OIDCClient = field(default_factory=OIDCClient)  # the provider's discovery and keys, cached
    mcp: McpServers | None = None  # llmgw.mcp.admin.PortalServers, for /admin/mcp; None where /mcp is not served

    def catalog(self) -> Catalog:
        """The model catalog's service, acting as the page's viewer (its changes are audited)."""
        from llmgw.control import Catalog

        found = getattr(self.plane, "catalog", None)  # the leader's reconciler's, with its policy
        if isinstance(found, Catalog):
            return found
        return Catalog(self.store, self.accounts.audit, hub=lambda: self.plane.settings.current.hub,
                       hub_client=getattr(self.plane, "hub_client", None))

    def engine_key(self) -> str | None:
        """The key the cluster's engines take, for reading their figures (the control plane's; None elsewhere)."""
        trust = getattr(self.plane, "trust", None)
        return getattr(trust, "engine_key", None) or None

    def trusted_proxies(self) -> Sequence[str]:
        return self.plane.settings.current.router.trusted_proxies

    def static_path(self, name: str) -> str:
        """/static/<digest>/<name>: a new digest with each change, so the file may be cached for ever."""
        digest = self.static[name][0]
        return f"/static/{digest}/{name}"


PORTAL = web.AppKey("llmgw.portal", Portal)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("llmgw.portal", "templates"),
        autoescape=jinja2.select_autoescape(("html", "svg", "xml"), default_for_string=True),
        undefined=jinja2.StrictUndefined,  # a name a template misspells fails its test, not silently blank
        trim_blocks=True, lstrip_blocks=True,
    )
    return env


def load_static() -> dict[str, tuple[str, bytes, str]]:
    types = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml", ".png": "image/png",
             ".ico": "image/x-icon", ".woff2": "font/woff2"}
    found: dict[str, tuple[str, bytes, str]] = {}
    folder = resources.files("llmgw.portal").joinpath("static")
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if not entry.is_file() or suffix not in types:
            continue
        body = entry.read_bytes()
        found[entry.name] = (hashlib.sha256(body).hexdigest()[:16], body, types[suffix])
    return found


async def serve_static(request: web.Request) -> web.StreamResponse:
    portal = request.app[PORTAL]
    name, digest = request.match_info["name"], request.match_info["digest"]
    known = portal.static.get(name)
    if known is None or known[0] != digest:
        raise web.HTTPNotFound(text=f"there is no static file {name} of that version here")
    return web.Response(body=known[1], content_type=known[2], headers={
        "Cache-Control": "public, max-age=31536000, immutable", "X-Content-Type-Options": "nosniff"})


# --- answering ------------------------------------------------------------------------------------


def wrap(portal_page: Page) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The page's handler inside the frame: session, role, CSRF and Origin, language, headers."""

    async def handle(request: web.Request) -> web.StreamResponse:
        portal = request.app[PORTAL]
        nonce = request[NONCE] = security.new_nonce()
        pre = request.cookies.get(security.CSRF_COOKIE, "")
        request[NEW_PRE_CSRF] = not pre
        request[PRE_CSRF] = pre or secrets.token_urlsafe(24)
        try:
            response = await _answer(request, portal, portal_page)
        except web.HTTPException as e:
            _finish(request, e, nonce)
            raise
        _finish(request, response, nonce)
        if isinstance(response, web.HTTPException):
            raise response  # returned rather than raised: aiohttp wants them raised
        return response

    return handle


async def _scope(portal: Portal, person: Person) -> Scope | None:
    """What the person administers: an admin the cluster without a read, anyone else by their memberships."""
    if person.role == "admin" and not person.disabled:
        return CLUSTER
    return await scope_of(portal.store, person)


async def _answer(request: web.Request, portal: Portal, portal_page: Page) -> web.StreamResponse:
    viewer: Viewer | None = None
    request[VIEWER] = None
    default = portal.plane.settings.current.portal.language
    request[LANG] = i18n.choose(request.headers.get("Accept-Language", ""), None, default)
    try:
        current = await portal.sessions.current(request.cookies.get(security.SESSION_COOKIE, ""))
        scope = None if current is None else await _scope(portal, current.person)
    except StoreError as e:
        log.warning("a portal page could not read its session: %s", e)
        return render_error(request, 503, N_("The gateway's store does not answer; try again in a minute."))
    if current is not None:
        lang = i18n.choose(request.headers.get("Accept-Language", ""), current.person.locale, default)
        viewer = Viewer(current.person, current.session, current.csrf, current.chat_token, lang, scope)
        request[VIEWER], request[LANG] = viewer, lang
    if viewer is None and not portal_page.public:
        return signin_redirect(request)
    if viewer is not None and viewer.person.must_change_password and portal_page.path not in MAY_WAIT_FOR_PASSWORD:
        # A password someone else set (an administrator's reset) is changed before anything else.
        return redirect(request, "/profile", notice=N_("Choose a new password before you go on."))
    if viewer is not None and not viewer.may_open(portal_page.role, portal_page.tenants):
        return render_error(request, 403, N_("This page is not for your role; ask an administrator "
                                             "if you need it."))
    if request.method not in ("GET", "HEAD"):
        refusal = await _check_post(request, portal, viewer, portal_page.public)
        if refusal is not None:
            return refusal
    try:
        return await portal_page.handler(request, viewer)
    except Conflict as e:  # a name taken, a stale form: the person can act on it
        return render_error(request, 409, i18n.say(request[LANG], e), translated=True)
    except StoreError as e:
        log.warning("a portal page could not reach the store: %s", e)
        return render_error(request, 503, i18n.say(request[LANG], e), translated=True)
    except (ExpectedError, Refusal, SettingsError) as e:  # the catalog's and settings' refusals too
        status = getattr(e, "status", 400)
        return render_error(request, status if isinstance(status, int) and 400 <= status < 600 else 400,
                            i18n.say(request[LANG], e), translated=True)
    except Exception:
        # A bug of ours, not the reader's doing: the traceback goes to the log for the operator, the
        # reader gets a page in their language that says so, never the traceback.
        log.exception("the portal page %s %s failed", request.method, portal_page.path)
        return render_error(request, 500, N_("Something went wrong on the gateway's side, and it was logged; "
                                             "try again, and tell an administrator if it keeps happening."))


async def _check_post(request: web.Request, portal: Portal, viewer: Viewer | None,
                      public: bool) -> web.StreamResponse | None:
    if not security.same_origin(request, portal.trusted_proxies()):
        return render_error(request, 403, N_("This form was sent from another site, so it was not "
                                             "carried out."))
    given = request.headers.get(security.CSRF_HEADER, "")
    if request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        posted = await request.post()
        request[FORM] = posted
        value = posted.get(security.CSRF_FIELD, "")
        given = given or (value if isinstance(value, str) else "")
    else:
        request[FORM] = MultiDictProxy(MultiDict())
    # Signed in, the session's value. The sign-in and sign-up forms (public pages) carry the value of
    # the browser's own llmgw_csrf cookie, which another site can neither read nor set: a signed-in
    # browser that posts one of them carries that too.
    expected = [viewer.csrf] if viewer is not None else []
    if public and not request[NEW_PRE_CSRF]:
        expected.append(request[PRE_CSRF])
    if not any(security.same_secret(given, value) for value in expected):
        return render_error(request, 403, N_("This form has expired or did not come from this site; "
                                             "reload the page and try again."))
    return None


def _finish(request: web.Request, response: web.StreamResponse, nonce: str) -> None:
    if response.prepared:
        return
    security.protect(response, nonce, private=True)
    if request.get(NEW_PRE_CSRF):
        security.set_cookie(response, security.CSRF_COOKIE, request[PRE_CSRF], secure=secure(request))


def secure(request: web.Request) -> bool:
    """Whether cookies set on this answer must be Secure (the browser came over TLS)."""
    return security.over_tls(request, request.app[PORTAL].trusted_proxies())


def signin_redirect(request: web.Request) -> web.HTTPSeeOther:
    target = request.path_qs if request.method in ("GET", "HEAD") else request.path
    return web.HTTPSeeOther("/signin?next=" + quote(security.local_path(target), safe="/"))


async def form(request: web.Request) -> MultiDictProxy[str]:
    """The posted form, its CSRF value already checked by the frame."""
    posted = request.get(FORM)
    if posted is None:
        posted = await request.post() if request.method not in ("GET", "HEAD") else MultiDictProxy(MultiDict())
    return MultiDictProxy(MultiDict((k, v) for k, v in posted.items() if isinstance(v, str)))


def redirect(request: web.Request, path: str, *, notice: str | None = None) -> web.HTTPSeeOther:
    """303 to a path of this site; `notice`, an N_() msgid or a sentence, is shown once on the next page."""
    response = web.HTTPSeeOther(security.local_path(path))
    if notice:
        text = base64.urlsafe_b64encode(notice[:NOTICE_MAX].encode()).decode()
        response.set_cookie(security.NOTICE_COOKIE, security.sign(request[PRE_CSRF], text), path="/",
                            httponly=True, samesite="Lax", secure=secure(request), max_age=60)
    return response


def _take_notice(request: web.Request, response: web.StreamResponse) -> str | None:
    signed = request.cookies.get(security.NOTICE_COOKIE)
    if not signed:
        return None
    security.drop_cookie(response, security.NOTICE_COOKIE, secure=secure(request))
    text = security.unsign("" if request.get(NEW_PRE_CSRF) else request[PRE_CSRF], signed)
    if text is None:
        return None
    try:
        return base64.urlsafe_b64decode(text.encode()).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def render(request: web.Request, template: str, *, status: int = 200, **context: object) -> web.Response:
    """A template in the frame: base.html's nav, notice and language, with the reader's helpers."""
    portal = request.app[PORTAL]
    viewer: Viewer | None = request.get(VIEWER)
    lang: str = request.get(LANG, "en")
    nonce: str = request.get(NONCE) or security.new_nonce()
    csrf = viewer.csrf if viewer is not None else request.get(PRE_CSRF, "")
    response = web.Response(status=status, content_type="text/html", charset="utf-8")
    notice = _take_notice(request, response)

    def translate(msgid: str, **params: object) -> str:
        said = i18n.gettext(lang, msgid)
        return said.format(**params) if params else said

    def csrf_field() -> Markup:
        return Markup('<input type="hidden" name="{}" value="{}">').format(security.CSRF_FIELD, csrf)

    nav = [replace(item, label=translate(item.label)) for item in portal.registry.nav
           if viewer is not None and viewer.may_open(item.role, item.tenants)]
    values = {
        "_": translate, "lang": lang, "nonce": nonce, "csrf": csrf, "csrf_field": csrf_field,
        "viewer": viewer, "nav": nav, "notice": translate(notice) if notice else None,
        "path": request.path, "languages": [(code, i18n.NAMES[code]) for code in i18n.LANGUAGES],
        "static": portal.static_path,
        "number": lambda n: i18n.number(lang, n), "percent": lambda x: i18n.percent(lang, x),
        "money": lambda m: i18n.money(lang, m), "date": lambda at: i18n.date(lang, at),
        "datetime": lambda at: i18n.datetime(lang, at),
        **context,
    }
    response.text = portal.env.get_template(template).render(values)
    security.protect(response, nonce, private=True)
    return response


async def not_found(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    return render_error(request, 404, N_("There is no such page here."))


def render_error(request: web.Request, status: int, message: str, *, translated: bool = False) -> web.Response:
    """The error page: `message` is an N_() msgid, or with `translated` already in the reader's language."""
    lang = request.get(LANG, "en")
    return render(request, "error.html", status=status,
                  message=message if translated else i18n.gettext(lang, message))

