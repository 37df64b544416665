"""Reaching a directory server: TLS always, the certificate and its host checked, each failure one sentence.

ldap3 is synchronous; everything here runs on a thread (llmgw.auth.ldap
calls it through asyncio.to_thread), with settings.timeout on the connect and
on every answer. A password never crosses a connection without TLS: ldaps://,
or ldap:// upgraded by StartTLS before the bind. ldap:// without start_tls is
refused here too, not only by the settings' validation, so settings written
straight into the store (or a test) cannot send one in the clear.

ldap3 reports a failed connection as an exception whose text carries the
cause (the ssl module's "certificate verify failed", its own "doesn't match
any name", errno 111); `_why` turns those into the sentences the admin reads.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import ldap3
from ldap3.core import exceptions as lx

from llmgw.auth.directoryerror import DirectoryError
from llmgw.config import LDAPSettings
from llmgw.errors import N_

log = logging.getLogger("llmgw.auth")


def _host(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (636 if parts.scheme == "ldaps" else 389)


def _tls(settings: LDAPSettings, host: str) -> ldap3.Tls:
    sni = None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        sni = host
    # version=None: ldap3 builds ssl.create_default_context, so TLS 1.2+ and the ssl module's ciphers.
    return ldap3.Tls(validate=ssl.CERT_REQUIRED, version=None,
                     ca_certs_data=settings.ca or None,
                     ca_certs_file=(settings.ca_file or None) if not settings.ca else None,
                     sni=sni)


def _why(error: BaseException, url: str, settings: LDAPSettings) -> DirectoryError:
    """The sentence for a connection that failed, from what ldap3 and ssl said."""
    host, port = _host(url)
    text = str(error)
    where = {"host": host, "port": port, "url": url}
    if "doesn't match" in text or "hostname mismatch" in text.lower():
        return DirectoryError(N_("{host}'s certificate does not name {host} among its subject alternative names; "
                                 "use the name the certificate holds in auth.ldap.urls, or have the certificate "
                                 "reissued with {host} in it"), kind="reach", params=where)
    if "certificate verify failed" in text or "unable to get local issuer" in text or "self signed" in text \
            or "self-signed" in text:
        if "expired" in text:
            return DirectoryError(N_("{host}'s certificate has expired; have it renewed"), kind="reach",
                                  params=where)
        return DirectoryError(N_("{host}'s certificate is not signed by an authority this gateway trusts; put the "
                                 "directory's CA in auth.ldap.ca (PEM) or auth.ldap.ca_file"),
                              kind="reach", params=where)
    if "Connection refused" in text or "[Errno 111]" in text:
        return DirectoryError(N_("{host}:{port} refused the connection; is the directory server running and "
                                 "listening there?"), kind="reach", params=where)
    if "timed out" in text or isinstance(error, TimeoutError):
        return DirectoryError(N_("{host}:{port} did not answer within {seconds} s; check the address and any "
                                 "firewall between"), kind="reach",
                              params=where | {"seconds": f"{float(settings.timeout):g}"})
    if "Name or service not known" in text or "nodename nor servname" in text or "[Errno -2]" in text \
            or "[Errno -3]" in text:
        return DirectoryError(N_("{host} is not a name this machine can resolve; check auth.ldap.urls"),
                              kind="reach", params=where)
    if isinstance(error, ssl.SSLError) or "ssl" in text.lower() or "tls" in text.lower():
        return DirectoryError(N_("TLS with {host}:{port} failed ({reason}); check that it serves "
                                 "{scheme} there"), kind="reach",
                              params=where | {"reason": _short(text), "scheme": urlsplit(url).scheme + "://"})
    return DirectoryError(N_("{host}:{port} could not be reached ({reason})"), kind="reach",
                          params=where | {"reason": _short(text)})


def _short(text: str) -> str:
    # ldap3 puts the whole peer certificate in some messages: a sentence keeps its first part.
    return text.split(" certificate {", 1)[0].strip()[:200]


def connect(settings: LDAPSettings, url: str) -> ldap3.Connection:
    """An open connection to `url` with TLS in force and the certificate checked; not yet bound."""
    scheme = urlsplit(url).scheme
    host, port = _host(url)
    if scheme == "ldap" and not settings.start_tls:
        raise DirectoryError(N_("{url} is plaintext LDAP, which would send passwords in the clear; use ldaps://, "
                                "or set start_tls: true"), kind="reach", params={"url": url})
    if scheme not in ("ldap", "ldaps") or not host:
        raise DirectoryError(N_('"{url}" is not ldaps://HOST or ldap://HOST'), kind="reach", params={"url": url})
    if settings.ca_file and not settings.ca and not os.path.isfile(settings.ca_file):
        raise DirectoryError(N_("auth.ldap.ca_file {path} is not on this machine; put the CA there, or its PEM "
                                "in auth.ldap.ca so no file is needed"), kind="reach",
                             params={"path": settings.ca_file})
    timeout = float(settings.timeout)
    server = ldap3.Server(host, port=port, use_ssl=scheme == "ldaps", tls=_tls(settings, host),
                          get_info=ldap3.DSA, connect_timeout=timeout)
    # ldap3 packs receive_timeout into SO_RCVTIMEO as whole seconds.
    conn = ldap3.Connection(server, receive_timeout=max(1, math.ceil(timeout)), raise_exceptions=True, read_only=True,
                            auto_referrals=False)
    try:
        # With StartTLS, the server's root DSE is read once TLS is up (start_tls reads it), not before: read
        # first, in the clear, its search was still finishing on slapd's side when StartTLS came, and a loaded
        # slapd refused it ("cannot start TLS when operations are outstanding"), failing the sign-in once in
        # a suite of runs.
        conn.open(read_server_info=scheme == "ldaps")
        if scheme == "ldap" and not conn.start_tls():
            conn.unbind()
            raise DirectoryError(N_("{host}:{port} would not start TLS; use ldaps://, or enable StartTLS on the "
                                    "server"), kind="reach", params={"host": host, "port": port})
    except DirectoryError:
        raise
    except (lx.LDAPException, OSError) as e:
        _close(conn)
        raise _why(e, url, settings) from None
    return conn


def _close(conn: ldap3.Connection) -> None:
    try:
        conn.unbind()
    except (lx.LDAPException, OSError):
        pass


# Active Directory says why a bind failed in its diagnostic message ("… data 52e, v4563");
# OpenLDAP says invalidCredentials for a wrong DN and a wrong password alike.
_AD_DATA = {
    "525": N_("the directory does not know the service account {dn}; check auth.ldap.bind_dn (AD: data 525)"),
    "52e": N_("the directory refused the service account's password; check what auth.ldap.bind_password_file "
              "holds (AD: data 52e)"),
    "530": N_("the service account {dn} may not sign in at this time (AD: data 530)"),
    "531": N_("the service account {dn} may not sign in from this machine (AD: data 531)"),
    "532": N_("the service account {dn}'s password has expired; set a new one in the directory and in "
              "auth.ldap.bind_password_file (AD: data 532)"),
    "533": N_("the service account {dn} is disabled in the directory (AD: data 533)"),
    "701": N_("the service account {dn} has expired in the directory (AD: data 701)"),
    "773": N_("the service account {dn} must change its password before it may bind (AD: data 773)"),
    "775": N_("the service account {dn} is locked out in the directory (AD: data 775)"),
}


def ad_data(result: Mapping[str, Any] | None) -> str:
    """AD's reason code from a bind result's message ("data 52e"), or ""."""
    message = str((result or {}).get("message", ""))
    _, found, rest = message.partition("data ")
    return rest[:3].lower() if found else ""


def service_bind(conn: ldap3.Connection, settings: LDAPSettings, password: str) -> None:
    """Bind `conn` as the service account (or anonymously when there is none)."""
    dn = settings.bind_dn
    try:
        conn.rebind(user=dn or None, password=password or None,
                    authentication=ldap3.SIMPLE if dn else ldap3.ANONYMOUS)
    except lx.LDAPBindError as e:
        raise _bind_refused(conn, dn, str(e)) from None
    except lx.LDAPOperationResult as e:
        raise _bind_refused(conn, dn, str(e)) from None
    except (lx.LDAPException, OSError) as e:
        raise DirectoryError(N_("the directory did not answer the service account's bind ({reason})"),
                             kind="bind", params={"reason": _short(str(e))}) from None


def _bind_refused(conn: ldap3.Connection, dn: str, reason: str) -> DirectoryError:
    code = ad_data(conn.result)
    if code in _AD_DATA:
        return DirectoryError(_AD_DATA[code], kind="bind", params={"dn": dn})
    if (conn.result or {}).get("result") == 49 or "invalidCredentials" in reason:
        return DirectoryError(N_("the directory refused the service account {dn}: its DN or password is wrong; "
                                 "check auth.ldap.bind_dn and what auth.ldap.bind_password_file holds"),
                              kind="bind", params={"dn": dn or "(anonymous)"})
    return DirectoryError(N_("the directory refused the service account {dn} ({reason})"), kind="bind",
                          params={"dn": dn or "(anonymous)", "reason": _short(reason)})


def person_bind(settings: LDAPSettings, url: str, dn: str, password: str) -> bool:
    """Whether `password` is the person's: a bind as them on a fresh connection, never kept.

    An empty password is refused here: LDAP treats a simple bind without one
    as an anonymous bind, which "succeeds" for anyone (RFC 4513 5.1.2)."""
    if not password or not dn:
        return False
    conn = connect(settings, url)
    try:
        conn.rebind(user=dn, password=password, authentication=ldap3.SIMPLE)
        return True
    except (lx.LDAPBindError, lx.LDAPOperationResult):
        log.info("the directory refused a sign-in as %s (AD data %s)", dn, ad_data(conn.result) or "-")
        return False
    except (lx.LDAPException, OSError) as e:
        raise _why(e, url, settings) from None
    finally:
        _close(conn)


def is_active_directory(conn: ldap3.Connection) -> bool:
    """Whether the server says it is Active Directory (LDAP_CAP_ACTIVE_DIRECTORY_OID in its root DSE)."""
    info = conn.server.info
    if info is None:
        return False
    caps = info.other.get("supportedCapabilities") or []
    return "1.2.840.113556.1.4.800" in caps
