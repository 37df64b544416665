"""Which files an outside provider's key may be read from.

`external.api_key_file` names a file on the control plane whose content is
sent to the provider as `Authorization: Bearer …`. The setting is shared
through the store, so whoever may change settings on one control plane
could name any file on every other: set to the master key, one client
request delivered it to the provider's URL (issue 10). So a key file:

- is none of the program's own secrets: the master key, the admin token,
  the agent port's TLS key (anything under `data_dir/tls`), the SQLite
  store and its journal, a node's certificate key — by path, after
  following links, and by the file itself (a hard link is the same file);
- belongs to the user the server runs as and only that user may read it
  (0600 or 0400), as the admin token and master key must;
- holds one key on one line: a PEM block, a YAML file or a password list is
  not a key, whatever its name.

Checked when the settings are written (a file not on this machine yet is
judged by its path only) and again each time the file is read, since the
settings may have been written on another control plane.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmgw.errors import N_

if TYPE_CHECKING:
    # server.py imports this module to check its settings; at run time the
    # objects arrive as arguments and only the checker needs their class.
    from llmgw.config.server import ClusterSettings, ServerConfig

# A provider key is a token of a few hundred characters at most; a file
# longer than this is not one, and is not read further.
MAX_KEY_BYTES = 4096
# A node's files, when an agent runs on this machine too (agent.yaml's default data_dir).
AGENT_DATA_DIR = "/var/lib/llmgw-agent"
# The master key's file in a control plane's data_dir; named here, below trust,
# so that config can list it among the program's own secrets without importing trust.
MASTER_KEY_FILE = "master-key"


class KeyFileRefused(Exception):
    """Why a file may not be a provider's key file, as a sentence."""


@dataclass(frozen=True)
class OwnSecrets:
    """The program's own secret files and the folders that hold only such files."""

    files: tuple[str, ...] = ()
    dirs: tuple[str, ...] = (AGENT_DATA_DIR,)


def own_secrets(cfg: ServerConfig) -> OwnSecrets:
    """A control plane's own secrets, from its server.yaml (a ServerConfig)."""
    files = [os.path.join(cfg.data_dir, MASTER_KEY_FILE), cfg.admin_token_path]
    store = cfg.store.strip()
    if store.startswith("sqlite:"):
        db = store[len("sqlite:"):].strip()
        files += [db, db + "-wal", db + "-shm", db + "-journal"]
    return OwnSecrets(files=tuple(files), dirs=(os.path.join(cfg.data_dir, "tls"), AGENT_DATA_DIR))


def _inside(path: str, folder: str) -> bool:
    folder = os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _same_file(info: os.stat_result, other: str) -> bool:
    try:
        theirs = os.stat(other)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (theirs.st_dev, theirs.st_ino)


def path_refusal(path: str, own: OwnSecrets) -> str | None:
    """Why `path` may not be a key file by where it is, or None (the file need not exist)."""
    if not os.path.isabs(path):
        return f"{path} is not an absolute path; name the key file from / so every control plane reads the same one"
    real = os.path.realpath(path)
    for secret in own.files:
        if real == os.path.realpath(secret):
            return f"{path} is one of llmgw's own secrets ({secret}), never a provider's key"
    for folder in own.dirs:
        if _inside(real, folder):
            return f"{path} is in {folder}, where llmgw keeps its own secrets; keep provider keys elsewhere"
    return None


def file_refusal(path: str, info: os.stat_result, own: OwnSecrets) -> str | None:
    """Why the file at `path` (as `os.stat` found it) may not be a key file, or None."""
    for secret in own.files:
        if _same_file(info, secret):
            return f"{path} is the same file as {secret}, one of llmgw's own secrets, never a provider's key"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file"
    if info.st_uid != os.geteuid():
        return (f"{path} belongs to another user (uid {info.st_uid}); a provider's key file must belong to the "
                f"user llmgw server runs as (chown it, then chmod 600)")
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return (f"{path} can be read by others (mode {stat.S_IMODE(info.st_mode):04o}); a provider's key file "
                f"must be readable by llmgw's user only: chmod 600 {path}")
    if info.st_size > MAX_KEY_BYTES:
        return f"{path} is {info.st_size} bytes, too long to be one key"
    return None


def check_key_file(path: str, own: OwnSecrets) -> None:
    """Raise KeyFileRefused when `path` may not be a key file; a file that is not there yet passes."""
    why = path_refusal(path, own)
    if why is None:
        try:
            info = os.stat(path)
        except OSError:
            return  # judged by its path only: it may be on another control plane, or made later
        why = file_refusal(path, info, own)
    if why is not None:
        raise KeyFileRefused(why)


def read_key_file(path: str, own: OwnSecrets) -> str:
    """The provider key in `path`, once every rule above holds; KeyFileRefused or OSError when not."""
    why = path_refusal(path, own)
    if why is not None:
        raise KeyFileRefused(why)
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise KeyFileRefused(f"{path} is not a regular file")  # before open: a device is not even opened
    # O_NOFOLLOW is not used: a link to a key file is fine, and what it leads to is checked below
    # on the very file opened (fstat), so a swap between a check and the read changes nothing.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as f:
        why = file_refusal(path, os.fstat(f.fileno()), own)
        if why is not None:
            raise KeyFileRefused(why)
        raw = f.read(MAX_KEY_BYTES + 1)
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise KeyFileRefused(f"{path} is not text; a provider's key file holds the key on one line") from None
    if not text:
        raise KeyFileRefused(f"{path} is empty")
    if len(text) > MAX_KEY_BYTES or any(c.isspace() or not c.isprintable() for c in text):
        raise KeyFileRefused(f"{path} holds more than one key on one line (a PEM block, a list, a document); "
                             "a provider's key file holds the key alone")
    return text


def check_settings_key_files(settings: ClusterSettings, own: OwnSecrets) -> None:
    """Refuse cluster settings (a ClusterSettings) naming a key file that may not be one, naming the key."""
    from llmgw.config.loader import Invalid

    for i, model in enumerate(settings.models):
        ext = model.external
        if ext is None:
            continue
        named = [("api_key_file", ext.api_key_file)] if ext.api_key_file else []
        named += [(f"api_key_files[{j}].file", k.file) for j, k in enumerate(ext.api_key_files)]
        for key, path in named:
            try:
                check_key_file(path, own)
            except KeyFileRefused as e:
                # Why a file may not be a key file is said in English for now.
                raise Invalid(f"models[{i}].external.{key}", N_("{reason}"), params={"reason": str(e)}) from None
    # Sign-in's secret files are held to the same rules: whoever may change settings could
    # otherwise point auth.ldap.bind_password_file at the master key and read it back in an error.
    auth = settings.auth
    for key, ref in (("auth.oidc.client_secret_file", auth.oidc.client_secret_file),
                     ("auth.ldap.bind_password_file", auth.ldap.bind_password_file),
                     ("auth.scim.token_file", auth.scim.token_file)):
        if ref and not ref.startswith("store:"):
            try:
                check_key_file(ref, own)
            except KeyFileRefused as e:
                raise Invalid(key, N_("{reason}"), params={"reason": str(e)}) from None
