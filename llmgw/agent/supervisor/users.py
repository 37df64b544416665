"""Who an engine runs as.

An agent runs as root (it installs engines, reads GPUs' counters, writes
/var/lib/llmgw); an engine is a large program that parses model files and
answers the network, and a flaw in either should not be root's. So an
agent that is root runs engines as an unprivileged user, `llmgw-engine` by
default, made as a system user the first time it is needed. An agent that
is not root has no one else to become and runs them as itself.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass

DEFAULT_USER = "llmgw-engine"


class UserError(RuntimeError):
    pass


@dataclass(frozen=True)
class RunAs:
    """What the engine's process becomes after the fork; None fields: the agent's own."""

    name: str
    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] = ()
    home: str = ""

    @property
    def switches(self) -> bool:
        return self.uid is not None

    def popen_args(self) -> dict:
        if not self.switches:
            return {}
        # The user's own supplementary groups (video, render): the GPUs' device
        # files are often theirs, and an engine without them sees no card.
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}


def resolve(user: str | None, *, is_root: bool | None = None, create: bool = True) -> RunAs:
    """Who engines run as: `user` when the agent is root, made when missing; the agent itself otherwise.

    `user` None or "" runs engines as the agent even when root — for a
    container whose root is already confined; say so in agent.yaml.
    """
    is_root = os.geteuid() == 0 if is_root is None else is_root
    me = _name_of(os.geteuid())
    if not is_root or not user:
        return RunAs(name=me)
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        if not create:
            raise UserError(f"the engine user {user!r} does not exist; create it "
                            f"(useradd --system {user}) or name another in agent.yaml") from None
        _create(user)
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise UserError(f"the engine user {user!r} was made with useradd but cannot be found; "
                            f"check /etc/nsswitch.conf") from None
    if entry.pw_uid == 0:
        raise UserError(f"the engine user {user!r} is root (uid 0): engines run unprivileged; name another user")
    groups = tuple(g for g in os.getgrouplist(entry.pw_name, entry.pw_gid) if g != entry.pw_gid)
    return RunAs(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, groups=groups, home=entry.pw_dir)


def _create(user: str) -> None:
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    if not os.path.exists(useradd):
        raise UserError(f"the engine user {user!r} does not exist and there is no useradd to make it; "
                        f"create it, or name an existing unprivileged user in agent.yaml")
    shell = "/usr/sbin/nologin" if os.path.exists("/usr/sbin/nologin") else "/bin/false"
    args = [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
            "--shell", shell, "--comment", "llmgw engines", user]
    # GPUs' device files belong to these groups on most distributions.
    extra = [g for g in ("video", "render") if _group_exists(g)]
    if extra:
        args[1:1] = ["--groups", ",".join(extra)]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0 and done.returncode != 9:  # 9: made meanwhile by another agent
        why = (done.stderr or done.stdout).strip().splitlines()
        raise UserError(f"the engine user {user!r} does not exist and useradd could not make it "
                        f"({why[-1] if why else f'exit {done.returncode}'}); create it, or name an "
                        f"existing unprivileged user in agent.yaml")


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def _name_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
