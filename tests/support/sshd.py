"""Debian's real sshd on a free loopback port, with a throwaway host key, client key and configuration.

The SSH installs' tests log in to it as root (we run as root, in CI too)
with a key made for the test: PermitRootLogin prohibit-password, so no
password of the machine is ever involved. The daemon runs in the
foreground (-D -e) as the test's child and is ended by its PID.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.pgcluster import free_port
from tests.support.waiting import wait_until

SSHD = "/usr/sbin/sshd"


def keygen(path: Path, kind: str = "ed25519") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "llmgw-test", "-f", str(path)], check=True,
                   timeout=60)
    return path


class Sshd:
    def __init__(self, root: Path, passwords: bool = False, addresses: tuple[str, ...] = ("127.0.0.1",)):
        self.dir = root / "sshd"
        self.dir.mkdir(parents=True)
        self.port = free_port()
        self.host_key = keygen(self.dir / "host_ed25519")
        self.client_key = keygen(self.dir / "client_ed25519")
        self.authorized = self.dir / "authorized_keys"
        self.authorized.write_text(Path(f"{self.client_key}.pub").read_text())
        self.config = self.dir / "sshd_config"
        self.config.write_text("\n".join([
            f"Port {self.port}",
            # Several loopback addresses stand for several machines (127.0.0.2, …: all of 127/8 is lo's).
            *(f"ListenAddress {address}" for address in addresses),
            f"HostKey {self.host_key}",
            f"PidFile {self.dir / 'sshd.pid'}",
            # The test's file for root; a user of the test's own (SudoUser) has one in its home, since sshd
            # reads a user's keys as that user, who cannot open root's temporary folder.
            f"AuthorizedKeysFile {self.authorized} .ssh/authorized_keys",
            # The test's files are in a temporary folder whose modes sshd's checks would refuse.
            "StrictModes no",
            # With passwords, root may try one (root's is locked here, so every one is wrong).
            f"PermitRootLogin {'yes' if passwords else 'prohibit-password'}",
            f"PasswordAuthentication {'yes' if passwords else 'no'}",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "Subsystem sftp internal-sftp",
            "LogLevel VERBOSE",
        ]) + "\n")
        self.log_path = self.dir / "sshd.log"
        self.proc: subprocess.Popen | None = None

    @property
    def host_public_key(self) -> str:
        return Path(f"{self.host_key}.pub").read_text().split()[1]

    def start(self) -> Sshd:
        # sshd refuses to start without its privilege separation directory,
        # which Debian makes only when the service runs.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_until(self._listening, 30, f"sshd listens on 127.0.0.1:{self.port} (log: {self.log_path})")
        return self

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"sshd exited with {self.proc.returncode}:\n{self.output()}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.proc:
            self.log.close()


class SudoUser:
    """A throwaway account of this machine that logs in with the test's client key and becomes root through
    Debian's sudo: asking for its password, or (nopasswd) not. Made with useradd and a sudoers.d file of its
    own, both removed at the end; its home is outside pytest's folder, which is private to root."""

    def __init__(self, sshd: Sshd, password: str, nopasswd: bool = False):
        if shutil.which("sudo") is None or shutil.which("useradd") is None:
            raise AssertionError("the sudo tests need Debian's sudo and passwd; `python3 build.py test` installs them "
                                 "(apt-get install sudo)")
        # A name of its own, not the worker's pid: an account an earlier run could not remove (its last ssh
        # session still ending) was met again by a later worker given the same pid, and useradd refused (9).
        self.name = f"llmgw-sudo-{secrets.token_hex(4)}"
        self.password = password
        self.home = Path(tempfile.mkdtemp(prefix="llmgw-sudo-home-"))
        os.chmod(self.home, 0o755)
        self.sudoers = Path(f"/etc/sudoers.d/{self.name}")
        subprocess.run(["useradd", "--home-dir", str(self.home), "--no-create-home", "--shell", "/bin/sh",
                        self.name], check=True, capture_output=True, timeout=30)
        try:
            subprocess.run(["chpasswd"], input=f"{self.name}:{password}\n", text=True, check=True,
                           capture_output=True, timeout=30)
            ssh = self.home / ".ssh"
            ssh.mkdir(mode=0o700)
            (ssh / "authorized_keys").write_text(Path(f"{sshd.client_key}.pub").read_text())
            subprocess.run(["chown", "-R", f"{self.name}:{self.name}", str(self.home)], check=True, timeout=30)
            # timestamp_type=global: sudo remembers a password given once for every later command, as it
            # does on machines configured so; an install must not count on being asked each time.
            rule = (f"Defaults:{self.name} timestamp_type=global\n"
                    f"{self.name} ALL=(ALL:ALL) {'NOPASSWD: ' if nopasswd else ''}ALL\n")
            self.sudoers.write_text(rule)
            os.chmod(self.sudoers, 0o440)
            checked = subprocess.run(["visudo", "-cf", str(self.sudoers)], capture_output=True, text=True,
                                     timeout=30)
            assert checked.returncode == 0, checked.stdout + checked.stderr
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        self.sudoers.unlink(missing_ok=True)
        # userdel refuses an account that still has a process (8): the sshd session of the test's last command
        # may still be closing. Those processes are the test's own logins; they are ended first.
        for _ in range(50):
            subprocess.run(["pkill", "-KILL", "-u", self.name], capture_output=True, timeout=30)
            if subprocess.run(["userdel", self.name], capture_output=True, timeout=30).returncode in (0, 6):
                break
            time.sleep(0.1)
        shutil.rmtree(self.home, ignore_errors=True)
