"""The SSH side of an install: who to log in as, how, whether the host is the one met before, and sudo.

Host keys: trust on first use, pinned. The first login to HOST:PORT records
its key in a known_hosts file (beside the control plane's admin token,
unless --known-hosts says otherwise) and shows its SHA256 fingerprint; a
later login with another key is refused before any password or key is
offered, with a sentence naming the file. A password is sent only to a host
whose key has been checked this way.

Secrets (the login password, the sudo password) are held in memory for the
run only: sudo's goes to `sudo -S` on stdin, never on a command line.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from llmgw.onboard.steps import StepFailed

STEP_LOGIN = "log in"
CONNECT_TIMEOUT = 20.0


@dataclass(frozen=True)
class Target:
    user: str
    host: str
    port: int = 22

    @classmethod
    def parse(cls, text: str, port: int | None = None) -> Target:
        """USER@HOST[:PORT] ([v6]:PORT for an IPv6 address); `port` (--port) wins over one in the text."""
        user, at, rest = text.rpartition("@")
        if not at or not user or not rest:
            raise StepFailed(STEP_LOGIN, f"--ssh {text!r} names no user: write USER@HOST, e.g. root@10.0.0.7")
        host, given = rest, None
        if rest.startswith("["):
            host, _, tail = rest[1:].partition("]")
            given = tail[1:] if tail.startswith(":") else None
        elif rest.count(":") == 1:
            host, given = rest.split(":")
        if given is not None and not given.isdigit():
            raise StepFailed(STEP_LOGIN, f"--ssh {text!r}: the port {given!r} is not a number")
        return cls(user, host, port or (int(given) if given else 22))

    @property
    def hostspec(self) -> str:
        """The host as known_hosts writes it."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def __str__(self) -> str:
        return f"{self.user}@{self.host}" + ("" if self.port == 22 else f":{self.port}")


@dataclass
class Credentials:
    key_file: str | None = None
    password: str | None = field(default=None, repr=False)
    sudo_password: str | None = field(default=None, repr=False)


class HostKeys:
    """A known_hosts file of our own: `[host]:port type base64` lines, first use recorded."""

    def __init__(self, path: Path):
        self.path = path
        self.first_use: str | None = None  # the fingerprint recorded on this login, to show
        self.changed: str | None = None  # the sentence for a key that is not the recorded one

    def recorded(self, target: Target) -> list[tuple[str, str]]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        found = []
        for line in lines:
            words = line.split()
            if len(words) >= 3 and not line.startswith("#") and target.hostspec in words[0].split(","):
                found.append((words[1], words[2]))
        return found

    def check(self, target: Target, key: asyncssh.SSHKey) -> bool:
        algorithm, data = key.export_public_key("openssh").decode().split()[:2]
        known = self.recorded(target)
        if (algorithm, data) in known:
            return True
        fingerprint = key.get_fingerprint("sha256")
        if known:
            self.changed = (f"{target.hostspec} now shows the host key {fingerprint}, not the one recorded in "
                            f"{self.path}; if the machine was reinstalled, check the new key there "
                            f"(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and remove its line from "
                            f"{self.path}, then run again")
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="ascii") as f:
            f.write(f"{target.hostspec} {algorithm} {data}\n")
        self.first_use = fingerprint
        return True


class _Client(asyncssh.SSHClient):
    def __init__(self, target: Target, keys: HostKeys):
        self.target, self.keys = target, keys

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self.keys.check(self.target, key)


class Session:
    """One logged-in SSH connection, and how to run a command as root over it."""

    def __init__(self, target: Target, conn: asyncssh.SSHClientConnection, credentials: Credentials):
        self.target, self.conn, self.credentials = target, conn, credentials
        self.sudo: list[str] | None = None  # the prefix that makes a command root's, found by `become_root`

    async def become_root(self) -> None:
        """How this login runs things as root: nothing for root, `sudo -n` or `sudo -S` with the password."""
        if self.target.user == "root":
            self.sudo = []
            return
        if (await self.conn.run("sudo -n true", check=False)).exit_status == 0:
            self.sudo = ["sudo", "-n", "--"]
            return
        if self.credentials.sudo_password is None:
            raise StepFailed(STEP_LOGIN, f"sudo on {self.target.host} asks {self.target.user} for a password; "
                                         "give --sudo-password (it is read from the terminal)")
        # -k: asked for the password every time. A sudo that remembered it (its
        # timestamp, kept per connection or machine-wide on some machines) would
        # leave the password's line on stdin for the command, which reads its plan there.
        self.sudo = ["sudo", "-S", "-k", "-p", "", "--"]
        check = await self.conn.run("sudo -S -k -p '' -- true", input=self.credentials.sudo_password + "\n",
                                    check=False)
        if check.exit_status != 0:
            raise StepFailed(STEP_LOGIN, f"sudo on {self.target.host} did not take the password given for "
                                         f"{self.target.user} (or {self.target.user} may not use sudo there)")

    def _as_root(self, argv: Sequence[str], stdin: str) -> tuple[str, str]:
        assert self.sudo is not None, "become_root first"
        command = shlex.join([*self.sudo, *argv])
        if self.sudo[:2] == ["sudo", "-S"]:
            # sudo reads its password a byte at a time up to the newline; what
            # follows is left on stdin for the command.
            stdin = (self.credentials.sudo_password or "") + "\n" + stdin
        return command, stdin

    async def run_as_root(self, argv: Sequence[str], stdin: str = "") -> tuple[int, str, str]:
        command, data = self._as_root(argv, stdin)
        done = await self.conn.run(command, input=data, check=False)
        return done.exit_status or 0, str(done.stdout or ""), str(done.stderr or "")

    async def lines_as_root(self, argv: Sequence[str], stdin: str, stderr: list[str]) -> AsyncIterator[str]:
        """The command's stdout line by line as it comes; its stderr collected into `stderr`."""
        command, data = self._as_root(argv, stdin)
        async with self.conn.create_process(command) as process:
            process.stdin.write(data)
            process.stdin.write_eof()
            errors = asyncio.ensure_future(process.stderr.read())
            async for line in process.stdout:
                yield str(line).rstrip("\n")
            await process.wait()
            stderr.append(str(await errors))
            stderr.append(f"exit {process.exit_status}")

    async def put(self, local: Path, remote: str) -> None:
        async with self.conn.start_sftp_client() as sftp:
            await sftp.put(str(local), remote)

    def close(self) -> None:
        self.conn.close()


async def connect(target: Target, credentials: Credentials, known_hosts: Path) -> tuple[Session, HostKeys]:
    """Logged in to `target`, its host key checked against `known_hosts`; StepFailed with the reason otherwise."""
    keys = HostKeys(known_hosts)
    options: dict[str, object] = {"username": target.user, "config": None,
                                  # An empty trusted set (not None, which trusts every key): each
                                  # key the host shows goes to _Client.validate_host_public_key.
                                  "known_hosts": ([], [], []), "connect_timeout": CONNECT_TIMEOUT}
    if credentials.key_file:
        try:
            options["client_keys"] = [asyncssh.read_private_key(credentials.key_file)]
        except FileNotFoundError:
            raise StepFailed(STEP_LOGIN, f"--key {credentials.key_file}: there is no such file") from None
        except (asyncssh.KeyImportError, ValueError) as e:
            raise StepFailed(STEP_LOGIN, f"--key {credentials.key_file} cannot be used ({e}); a key with a "
                                         "passphrase goes into ssh-agent (ssh-add FILE), without --key") from None
        options["agent_path"] = None
        options["password"] = None
    elif credentials.password is not None:
        options.update(password=credentials.password, client_keys=None, agent_path=None)
    who = str(target)
    try:
        conn = await asyncssh.connect(target.host, target.port,
                                      client_factory=lambda: _Client(target, keys), **options)
    except asyncssh.HostKeyNotVerifiable:
        raise StepFailed(STEP_LOGIN, keys.changed or f"{target.hostspec}'s host key could not be checked") from None
    except asyncssh.PermissionDenied:
        if credentials.password is not None and not credentials.key_file:
            raise StepFailed(STEP_LOGIN, f"{who} did not accept the password given; check it (and that sshd "
                                         "there allows passwords), or log in with --key FILE") from None
        how = (f"the key {credentials.key_file}" if credentials.key_file
               else "the SSH agent's keys or ~/.ssh's default keys")
        raise StepFailed(STEP_LOGIN, f"{who} did not accept {how}; put its public key in ~{target.user}"
                                     "/.ssh/authorized_keys there, or give --key FILE or --password") from None
    except (TimeoutError, OSError) as e:
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise StepFailed(STEP_LOGIN, f"cannot reach {target.host} port {target.port} ({reason}); is sshd running "
                                     "there, and is the address right?") from None
    except asyncssh.Error as e:
        raise StepFailed(STEP_LOGIN, f"the SSH login to {who} failed: {e.reason}") from None
    return Session(target, conn, credentials), keys
