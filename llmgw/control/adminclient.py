"""The admin API's client, for `llmgw ctl` and `llmgw keys`.

Plain urllib: a command makes one or two calls and exits, so an event loop
and a connection pool would only add start-up time.

It lives beside the admin API rather than in cli/ because the benchmark
(llmgw/benchmark/overhead.py) and build.py's rigs call the admin API too, and
nothing below the CLI may import the CLI. Not inside adminapi/: importing
that package starts the server's imports, a second more for every `llmgw ctl`.

Every `llmgw` command's parser imports this module (for AdminError), `llmgw
--help` included, so what only a call needs (urllib.request and what it
brings, the token's and the checkout's modules) is imported by the call
(issue 26).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from typing import TYPE_CHECKING, Any

from llmgw.errors import ExpectedError

if TYPE_CHECKING:
    from http.client import HTTPResponse

    from llmgw.config import ServerConfig

DEFAULT_ADMIN = "127.0.0.1:9090"
SYSTEM_TOKEN = "/var/lib/llmgw/admin-token"  # noqa: S105 - the file's path, not a token


class AdminError(ExpectedError):
    """A refusal or a failure to reach the admin API, as a sentence; `status` when it answered."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None,
                 answer: dict[str, Any] | None = None):
        super().__init__(message)
        self.status, self.code = status, code
        self.answer = answer or {}  # the whole refusal, for what it says beside the error (a trial's steps)


def _read_config(path: str) -> ServerConfig | None:
    from llmgw.config import ConfigError, load_server_config

    if not os.path.exists(path):
        return None
    try:
        return load_server_config(path)
    except (OSError, ConfigError):
        return None


def env_config() -> ServerConfig | None:
    """The server.yaml $LLMGW_CONFIG names, or None.

    Its data_dir and admin_token_file say where the admin token is, and
    listen.admin where the admin API listens: a server set up with another
    data_dir is found without --token-file (issue 10). One that cannot be
    read leaves the defaults, and the token's own sentence says what is wrong.
    """
    path = os.environ.get("LLMGW_CONFIG")
    return _read_config(path) if path else None


def system_config() -> ServerConfig | None:
    """/etc/llmgw/server.yaml, or None; read as env_config reads its file."""
    from llmgw.config import SYSTEM_CONFIG

    return _read_config(SYSTEM_CONFIG)


# Where the admin token and address come from, first found wins: the flags,
# the environment ($LLMGW_TOKEN_FILE, $LLMGW_ADMIN, $LLMGW_CONFIG's
# server.yaml), the checkout found walking up from the working directory
# (`python3 build.py run`'s var/, whose server listens on the default
# address), then /etc/llmgw/server.yaml and the system's defaults.


def _located() -> tuple[ServerConfig | None, str | None]:
    """(the server.yaml that counts, read or None; the checkout's token or None), by the order above.

    $LLMGW_CONFIG set is that file alone, even when it cannot be read: a
    person who named a file means it, not the next place along.
    """
    from llmgw.checkout import ADMIN_TOKEN, checkout_file

    if os.environ.get("LLMGW_CONFIG"):
        return env_config(), None
    if (found := checkout_file(ADMIN_TOKEN)) is not None:
        return None, found
    return system_config(), None


def token_file(given: str | None) -> str:
    if given:
        return given
    if os.environ.get("LLMGW_TOKEN_FILE"):
        return os.environ["LLMGW_TOKEN_FILE"]
    cfg, found = _located()
    if found is not None:
        return found
    return cfg.admin_token_path if cfg is not None else SYSTEM_TOKEN


def admin_address() -> str:
    cfg, _ = _located()
    if cfg is None:
        return DEFAULT_ADMIN
    admin = cfg.listen.admin
    host = "127.0.0.1" if admin.all_interfaces else admin.host
    return f"[{host}]:{admin.port}" if ":" in host else f"{host}:{admin.port}"


class AdminClient:
    def __init__(self, address: str | None = None, token_path: str | None = None, timeout: float = 30.0,
                 via: str = "cli"):
        self.address = address or os.environ.get("LLMGW_ADMIN") or admin_address()
        self.token_path = token_file(token_path)
        self.timeout = timeout
        self.via = via  # "cli" or "console": what the audit log says the change came through
        self._token: str | None = None

    def _base(self) -> str:
        address = self.address
        if not address.startswith(("http://", "https://")):
            if address.startswith(":"):
                address = "127.0.0.1" + address
            address = "http://" + address
        return address.rstrip("/")

    def token(self) -> str:
        if self._token is None:
            from llmgw.control.token import TokenError, read_token

            try:
                self._token = read_token(self.token_path)
            except FileNotFoundError:
                raise AdminError(
                    f"there is no admin token at {self.token_path}; is llmgw server set up on this "
                    "machine? (in a checkout, `python3 build.py run` makes var/admin-token; elsewhere "
                    "give the token with --token-file)") from None
            except PermissionError:
                raise AdminError(f"cannot read the admin token at {self.token_path}: permission denied; "
                                 "run as root or as the llmgw user") from None
            except TokenError as e:
                raise AdminError(str(e)) from None
        return self._token

    def call(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
        import urllib.error
        import urllib.request

        url = self._base() + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={  # noqa: S310 - _base() is http(s)
            "Authorization": f"Bearer {self.token()}",
            "Content-Type": "application/json",
            "X-Llmgw-Actor": _who(),
            "X-Llmgw-Via": self.via,
        })
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - _base() is http(s)
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                answer = json.loads(raw)
                error = answer["error"]
                raise AdminError(error["message"], e.code, error.get("code"), answer) from None
            except (ValueError, KeyError, TypeError):
                raise AdminError(f"the admin API answered {e.code} {e.reason}", e.code) from None
        except urllib.error.URLError as e:
            reason = e.reason
            if isinstance(reason, ConnectionRefusedError) or "refused" in str(reason).lower():
                raise AdminError(
                    f"no llmgw server answers at {self.address}; is it running? "
                    "(systemctl status llmgw-server, or python3 build.py run in a checkout)") from None
            if isinstance(reason, TimeoutError):  # socket.timeout is the same class since Python 3.10
                raise AdminError(f"the llmgw server at {self.address} did not answer in "
                                 f"{self.timeout:.0f} s") from None
            raise AdminError(f"cannot reach the llmgw server at {self.address}: {reason}") from None
        except TimeoutError:
            raise AdminError(f"the llmgw server at {self.address} did not answer in {self.timeout:.0f} s") from None

    # people and the tree: the admin API's routes by name, for the CLI and for build.py's rigs

    def people(self) -> list[dict[str, Any]]:
        return _objects(self.call("GET", "/api/v1/people"))

    def person(self, ident: str) -> dict[str, Any]:
        return _object(self.call("GET", _person_path(ident)))

    def person_add(self, email: str, name: str, *, role: str = "member", password: str | None = None,
                   member_of: list[str] | None = None) -> dict[str, Any]:
        """The new person's view; with no password given, "password" holds the one made (shown once)."""
        return _object(self.call("POST", "/api/v1/people", {"email": email, "name": name, "role": role,
                                                            "password": password, "member_of": member_of or []}))

    def person_role(self, ident: str, role: str) -> dict[str, Any]:
        return _object(self.call("POST", _person_path(ident, "role"), {"role": role}))

    def person_suspend(self, ident: str, *, lift: bool = False) -> dict[str, Any]:
        return _object(self.call("POST", _person_path(ident, "suspend"), {"lift": lift}))

    def person_link(self, ident: str, source: str, subject: str) -> dict[str, Any]:
        """Tie a directory's identity to the person on purpose; their view, identities included."""
        return _object(self.call("POST", _person_path(ident, "link"), {"source": source, "subject": subject}))

    def person_reset_password(self, ident: str) -> dict[str, Any]:
        """The person's view with "password": the new one, shown once."""
        return _object(self.call("POST", _person_path(ident, "reset-password"), {}))

    def person_membership(self, ident: str, place: str, *, remove: bool = False) -> dict[str, Any]:
        return _object(self.call("POST", _person_path(ident, "memberships"), {"place": place, "remove": remove}))

    def person_administer(self, ident: str, place: str, *, remove: bool = False) -> dict[str, Any]:
        return _object(self.call("POST", _person_path(ident, "administer"), {"place": place, "remove": remove}))

    def person_token(self, ident: str) -> dict[str, Any]:
        """A new token of the person's own; "token" holds its secret, shown once."""
        return _object(self.call("POST", _person_path(ident, "tokens"), {}))

    def person_tokens(self, ident: str) -> list[dict[str, Any]]:
        return _objects(self.call("GET", _person_path(ident, "tokens")))

    def person_token_revoke(self, ident: str, token_id: str) -> dict[str, Any]:
        path = _person_path(ident, f"tokens/{urllib.parse.quote(token_id, safe='')}/revoke")
        return _object(self.call("POST", path, {}))

    # sign-in from the directory (docs/sign-in.md)

    def auth(self) -> dict[str, Any]:
        return _object(self.call("GET", "/api/v1/auth"))

    def auth_test(self, kind: str, settings: dict[str, Any] | None = None, login: str = "",
                  redirect_url: str = "") -> dict[str, Any]:
        return _object(self.call("POST", f"/api/v1/auth/test/{kind}",
                                 {"settings": settings, "login": login or None, "redirect_url": redirect_url or None}))

    def auth_keep(self, kind: str, settings: dict[str, Any], login: str = "") -> dict[str, Any]:
        return _object(self.call("PUT", f"/api/v1/auth/{kind}", {"settings": settings, "login": login or None}))

    def auth_off(self, kind: str) -> dict[str, Any]:
        return _object(self.call("DELETE", f"/api/v1/auth/{kind}"))

    def auth_secret_put(self, name: str, value: str) -> str:
        answer = self.call("PUT", f"/api/v1/auth/secrets/{urllib.parse.quote(name, safe='')}", {"value": value})
        return _text(_object(answer)["ref"])

    def auth_secret_delete(self, name: str) -> None:
        self.call("DELETE", f"/api/v1/auth/secrets/{urllib.parse.quote(name, safe='')}")

    def scim_token(self) -> str:
        return _text(_object(self.call("POST", "/api/v1/auth/scim-token"))["token"])

    def ldap_sync(self) -> dict[str, Any]:
        return _object(self.call("POST", "/api/v1/auth/ldap/sync"))

    def tree(self) -> list[dict[str, Any]]:
        return _objects(_object(self.call("GET", "/api/v1/tree"))["orgs"])

    def tree_add(self, kind: str, path: str) -> dict[str, Any]:
        return _object(self.call("POST", "/api/v1/tree", {"kind": kind, "path": path}))

    def stream(self, path: str, query: dict[str, Any] | None = None) -> HTTPResponse:
        """GET `path` and return the open response, to be read as it arrives
        (an export too large to hold in memory). The caller closes it."""
        import urllib.error
        import urllib.request

        url = self._base() + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        request = urllib.request.Request(url, method="GET", headers={  # noqa: S310 - _base() is http(s)
            "Authorization": f"Bearer {self.token()}",
            "X-Llmgw-Actor": _who(),
            "X-Llmgw-Via": self.via,
        })
        try:
            response: HTTPResponse = urllib.request.urlopen(request, timeout=self.timeout)  # noqa: S310 - _base() is http(s)
        except (urllib.error.URLError, TimeoutError) as e:
            raise _stream_refusal(self, e) from None
        return response


def _object(answer: Any) -> dict[str, Any]:
    """`answer` as the JSON object its route answers with: where JSON from the server becomes typed."""
    if not isinstance(answer, dict):
        raise AdminError(_NOT_OURS.format(what="an object"))
    return answer


def _objects(answer: Any) -> list[dict[str, Any]]:
    if not isinstance(answer, list) or not all(isinstance(item, dict) for item in answer):
        raise AdminError(_NOT_OURS.format(what="a list of objects"))
    return answer


def _text(answer: Any) -> str:
    if not isinstance(answer, str):
        raise AdminError(_NOT_OURS.format(what="a string"))
    return answer


# Only a server of another version (or not llmgw at all) answers a route with another shape.
_NOT_OURS = "the admin API did not answer with {what} as this llmgw expects; is the server the same version?"


def _person_path(ident: str, action: str = "") -> str:
    # An e-mail goes in the path as it is but for what would end the segment or the path.
    path = "/api/v1/people/" + urllib.parse.quote(ident, safe="@+")
    return f"{path}/{action}" if action else path


def _who() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for this uid, as in some containers
        return f"uid {os.getuid()}"


def _stream_refusal(client: AdminClient, e: BaseException) -> AdminError:
    """The sentence for a failed streaming request, as `call` says it."""
    import urllib.error

    if isinstance(e, urllib.error.HTTPError):
        raw = e.read()
        try:
            error = json.loads(raw)["error"]
            return AdminError(error["message"], e.code, error.get("code"))
        except (ValueError, KeyError, TypeError):
            return AdminError(f"the admin API answered {e.code} {e.reason}", e.code)
    reason = getattr(e, "reason", e)
    if isinstance(reason, ConnectionRefusedError) or "refused" in str(reason).lower():
        return AdminError(f"no llmgw server answers at {client.address}; is it running? "
                          "(systemctl status llmgw-server, or python3 build.py run in a checkout)")
    if isinstance(reason, TimeoutError):
        return AdminError(f"the llmgw server at {client.address} did not answer in {client.timeout:.0f} s")
    return AdminError(f"cannot reach the llmgw server at {client.address}: {reason}")
