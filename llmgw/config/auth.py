"""Sign-in from the company's directory: OpenID Connect, LDAP/Active Directory and SCIM (issue 14).

Cluster settings under `auth:`. A directory's groups give people their role
and their places in the tree through the same two maps in each block
(`roles`, `memberships`), read again at every sign-in and sync.

Secrets are never written here: `client_secret_file`, `bind_password_file`
and `token_file` name a file on every control plane, or `store:auth/NAME`, a
value sealed under the master key in the store (`llmgw ctl auth secret set
NAME`), so nothing has to be copied to each machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from llmgw.config.loader import Invalid
from llmgw.config.types import Duration
from llmgw.errors import N_

STORE_SECRET_PREFIX = "store:auth/"  # noqa: S105 - a prefix naming where a secret is kept
GIVABLE_ROLES = ("admin", "operator")  # "member" is what no group gives
_PLACE_KINDS = ("org", "team", "project")


def check_secret_ref(key: str, ref: str) -> None:
    """A secret's reference is an absolute path or store:auth/NAME."""
    if not ref:
        return
    if ref.startswith("store:"):
        name = ref[len(STORE_SECRET_PREFIX):] if ref.startswith(STORE_SECRET_PREFIX) else ""
        if not name or not all(c.isalnum() or c in "-_." for c in name):
            raise Invalid(key, N_('"{ref}" is not a stored secret; write store:auth/NAME with letters, digits, '
                                  '"-", "_" or "."'), params={"ref": ref})
        return
    if not ref.startswith("/"):
        raise Invalid(key, N_('"{ref}" is neither an absolute path nor store:auth/NAME'), params={"ref": ref})


def _check_mapping(roles: dict[str, list[str]], memberships: dict[str, str]) -> None:
    for role, groups in roles.items():
        if role not in GIVABLE_ROLES:
            raise Invalid(f"roles.{role}", N_('"{role}" is not a role a group can give; those are {roles}'),
                          params={"role": role, "roles": ", ".join(GIVABLE_ROLES)})
        for i, group in enumerate(groups):
            if not group.strip():
                raise Invalid(f"roles.{role}[{i}]", N_("a group's name is empty"))
    for group, place in memberships.items():
        kind, colon, path = place.partition(":")
        depth = {"org": 1, "team": 2, "project": 3}.get(kind, 0)
        if not colon or kind not in _PLACE_KINDS or len(path.split("/")) != depth or not all(path.split("/")):
            raise Invalid(f"memberships.{group}",
                          N_('"{place}" is not a place: write org:NAME, team:ORG/TEAM or project:ORG/TEAM/PROJECT'),
                          params={"place": place})


@dataclass(frozen=True)
class OIDCSettings:
    issuer: str = ""
    """The identity provider's issuer URL; its /.well-known/openid-configuration is read from there.
    Empty: no single sign-on. https, except on a loopback address."""

    client_id: str = ""
    """The client (application) id registered at the provider."""

    client_secret_file: str = ""
    """Where the client's secret is: an absolute path on every control plane (0600, the llmgw user's),
    or store:auth/NAME, sealed in the store by `llmgw ctl auth secret set NAME`."""

    redirect_url: str = ""
    """The address the provider sends people back to, registered there:
    https://GATEWAY/login/oidc/callback. Empty: portal.address's /login/oidc/callback. With neither set,
    single sign-on does not start: the address a browser sent (its Host header) is never trusted."""

    scopes: list[str] = field(default_factory=lambda: ["openid", "email", "profile"])
    """What is asked of the provider; add the one that carries groups where it needs one (Keycloak: groups)."""

    groups_claim: str = "groups"
    """The ID token's claim that lists the person's groups."""

    verified_email_claim: str = "email_verified"
    """The ID token's claim by which the provider vouches for `email`: only its boolean true ties a first
    sign-in to an existing account with that e-mail (the string "true" does not). Entra ID sends no
    email_verified and lets people edit their e-mail in many tenants: name its optional claim xms_edov
    there, or leave this empty to tie by the provider's subject (Entra: oid and tid) only. An e-mail not
    vouched for makes its own account; one that is an existing account's is refused, and an administrator
    links the two on purpose (llmgw people link). preferred_username and upn are never taken as vouched."""

    label: str = ""
    """The button says "Sign in with LABEL"; empty says "Sign in with single sign-on"."""

    create_accounts: bool = True
    """Make an account at the first sign-in of someone the provider vouches for. Off: only people
    who already have an account (by e-mail) may sign in this way."""

    no_passwords: bool = False
    """Refuse portal passwords for everyone but `auth.break_glass`: everyone signs in through the provider."""

    roles: dict[str, list[str]] = field(default_factory=dict)
    """Which groups give a role: {admin: [llmgw-admins], operator: [llmgw-ops]}. Read at every sign-in;
    someone in none of them is a member. Empty: roles are given by hand only."""

    memberships: dict[str, str] = field(default_factory=dict)
    """A group's place in the tree: {ml-engineers: "team:Acme/ml"}. Joined at sign-in, and left at the
    next sign-in after the person leaves the group. Places given by hand are never taken away."""

    timeout: Duration = Duration("10s")
    """How long one round trip to the provider may take."""

    @property
    def enabled(self) -> bool:
        return bool(self.issuer)

    def validate(self) -> None:
        if not self.issuer:
            return
        url = urlsplit(self.issuer)
        loopback = url.hostname in ("127.0.0.1", "::1", "localhost")
        if url.scheme != "https" and not (url.scheme == "http" and loopback):
            raise Invalid("issuer", N_('"{issuer}" is not an https URL; an identity provider is reached over '
                                       'https (http only on a loopback address)'), params={"issuer": self.issuer})
        if not self.client_id:
            raise Invalid("client_id", N_("single sign-on needs the client id registered at the provider"))
        check_secret_ref("client_secret_file", self.client_secret_file)
        if "openid" not in self.scopes:
            raise Invalid("scopes", N_('must include "openid"'))
        if float(self.timeout) <= 0:
            raise Invalid("timeout", N_("must be longer than 0, got {value}"), params={"value": self.timeout})
        _check_mapping(self.roles, self.memberships)


@dataclass(frozen=True)
class LDAPSettings:
    urls: list[str] = field(default_factory=list)
    """The directory's servers, tried in turn: ldaps://HOST (636), or ldap://HOST (389) with start_tls.
    Empty: no directory sign-in."""

    start_tls: bool = False
    """Upgrade an ldap:// connection to TLS before anything is sent. ldap:// without it is refused:
    a password never crosses a connection without TLS."""

    ca_file: str = ""
    """The authority the servers' certificates are checked against, when it is not the system's."""

    ca: str = ""
    """The same authority written out (PEM), so no file has to be put on every control plane; wins over ca_file."""

    bind_dn: str = ""
    """The service account that finds people and reads their groups; it writes nothing."""

    bind_password_file: str = ""
    """Where the service account's password is: an absolute path, or store:auth/NAME."""

    base_dn: str = ""
    """Where people are searched for, subtree included."""

    group_base_dn: str = ""
    """Where their groups are; empty: base_dn's domain root (its DC= parts)."""

    user_filter: str = ""
    """Narrows who may sign in, ANDed with the login match: (memberOf=CN=llmgw-users,…). Empty: every
    enabled person under base_dn."""

    domain: str = ""
    """The NetBIOS domain (CORP) people may type before their name: CORP\\ada. Empty: any."""

    label: str = ""
    """The sign-in form says "Sign in with your LABEL account"; empty says "directory"."""

    create_accounts: bool = True
    """Make an account at the first sign-in of someone the directory vouches for."""

    trust_email: bool = False
    """The directory vouches for its mail attribute (only its administrators can change it, as in Active
    Directory by default): a first sign-in whose mail is an existing account's is tied to that account.
    Off: such a sign-in is refused, and an administrator links the two on purpose (llmgw people link)."""

    roles: dict[str, list[str]] = field(default_factory=dict)
    """Which groups give a role, by CN or whole DN; nested groups count. Read at every sign-in and sync."""

    memberships: dict[str, str] = field(default_factory=dict)
    """A group (CN or DN) to a place in the tree, joined at sign-in and kept by the sync."""

    sync_interval: Duration = Duration("15m")
    """How often the leader reads the directory: suspends people disabled or gone there, reinstates them,
    and moves roles and places with their groups. 0 turns the sync off."""

    timeout: Duration = Duration("10s")
    """How long one round trip to a server may take."""

    @property
    def enabled(self) -> bool:
        return bool(self.urls)

    def validate(self) -> None:
        if not self.urls:
            return
        for i, url in enumerate(self.urls):
            scheme = urlsplit(url).scheme
            if scheme not in ("ldap", "ldaps") or not urlsplit(url).hostname:
                raise Invalid(f"urls[{i}]", N_('"{url}" is not ldaps://HOST or ldap://HOST'), params={"url": url})
            if scheme == "ldap" and not self.start_tls:
                raise Invalid(f"urls[{i}]", N_('{url} is plaintext LDAP, which would send passwords in the clear; '
                                               'use ldaps://, or set start_tls: true'), params={"url": url})
        if self.ca and "-----BEGIN CERTIFICATE-----" not in self.ca:
            raise Invalid("ca", N_("is not a PEM certificate (-----BEGIN CERTIFICATE-----)"))
        if self.ca_file and not self.ca_file.startswith("/"):
            raise Invalid("ca_file", N_('"{ref}" is not an absolute path'), params={"ref": self.ca_file})
        if not self.base_dn:
            raise Invalid("base_dn", N_("directory sign-in needs base_dn, where people are"))
        check_secret_ref("bind_password_file", self.bind_password_file)
        if bool(self.bind_dn) != bool(self.bind_password_file):
            raise Invalid("bind_dn", N_("bind_dn and bind_password_file go together: the service account and "
                                        "where its password is"))
        if float(self.timeout) <= 0:
            raise Invalid("timeout", N_("must be longer than 0, got {value}"), params={"value": self.timeout})
        _check_mapping(self.roles, self.memberships)


@dataclass(frozen=True)
class SCIMSettings:
    enabled: bool = False
    """Answer SCIM 2.0 at /scim/v2, for a provider (Entra ID, Okta) that makes and removes accounts."""

    token_file: str = ""
    """Where the bearer token the provider sends is: an absolute path, or store:auth/NAME. Empty: the
    token `llmgw ctl auth scim-token` made (the store keeps only its digest)."""

    trust_email: bool = False
    """The provider vouches for the e-mails it pushes: a user whose e-mail is an existing account's is tied
    to that account. Off: such a user is refused (409), and an administrator links the two on purpose
    (llmgw people link EMAIL scim USERNAME) before the provider pushes it again."""

    roles: dict[str, list[str]] = field(default_factory=dict)
    """Which SCIM groups (by displayName) give a role."""

    memberships: dict[str, str] = field(default_factory=dict)
    """A SCIM group (by displayName) to a place in the tree; a member removed from the group leaves it."""

    def validate(self) -> None:
        check_secret_ref("token_file", self.token_file)
        _check_mapping(self.roles, self.memberships)
