"""The bootstrap of dist/llmgw.pyz: unpack once, then run `llmgw`.

The archive carries llmgw and its pure-Python dependencies under lib/, and
the compiled ones (apsw, asyncpg, orjson, uvloop, psutil, …) under
lib-cp311/, lib-cp312/, … one per CPython version it was built for. Python
cannot import native extension modules from inside a zip file. So the first
start unpacks lib/ and its own version's directory into a cache directory
named after the archive's contents and that version, and every start after
that finds it there and only puts it first on sys.path. Built by `python3 build.py dist`; see packaging/README.md.

Standard library only, and nothing imported from lib/ before it is on the
path.
"""

import hashlib
import json
import os
import platform
import shutil
import stat
import sys
import tempfile
import time
import zipfile

# A half-unpacked directory older than this was left by a start that died;
# one younger may be another start unpacking right now.
_STALE_S = 3600
# Each Python's unpacked versions kept beside the one just unpacked, and how long
# one must have gone unused before it may go: an upgrade's rollback keeps the
# version before, and a start marks its version used (main), so a version a
# process started from within the day is never taken from under it.
_KEEP_EARLIER = 2
_UNUSED_S = 86400
_MARK_EVERY_S = 3600
# In each unpacked directory: what it holds, {path: [CRC-32, size, mode]}, so
# that the next version can link the files it has in common (_unpack).
CONTENTS = ".contents.json"


def _say(message):
    sys.stderr.write("llmgw: %s\n" % message)


def _archive_path():
    # Run as a zipapp, __file__ is "<archive>/__main__.py" whatever sys.argv[0]
    # or a symlink (/usr/local/bin/llmgw) says.
    return os.path.dirname(os.path.abspath(__file__))


def _content_hash(zf):
    """A digest of what the archive holds, from its central directory alone.

    Names, CRC-32s and sizes change with any change to a file, and reading
    them costs a few milliseconds, where hashing the whole archive (tens of
    megabytes) would be paid on every start.
    """
    digest = hashlib.sha256()
    for info in zf.infolist():
        digest.update(("%s\0%08x\0%d\n" % (info.filename, info.CRC, info.file_size)).encode())
    return digest.hexdigest()[:16]


def _choose_version(zf):
    """The lib-cpXY/ directory of compiled modules for this interpreter, or a refusal.

    One archive carries the pure-Python dependencies once, in lib/, and the
    compiled ones once per CPython version it was built for; the running
    interpreter takes its own. Checked before anything is unpacked, since
    native modules built for another version fail as an obscure ImportError
    from deep inside cryptography.
    """
    try:
        built = json.loads(zf.read("pyz-built-for.json"))
    except (KeyError, ValueError):
        _say("this archive has no pyz-built-for.json; it was not made by `python3 build.py dist`.")
        sys.exit(1)
    python = "%d.%d" % sys.version_info[:2]
    carried = built.get("pythons") or []
    here = {
        "implementation": sys.implementation.name,
        "machine": platform.machine(),
        "system": platform.system(),
    }
    if any(built.get(key) != value for key, value in here.items()):
        _say(
            "this llmgw.pyz was built for %s on %s %s, and this is %s %s on %s %s (%s); its "
            "native modules will not load here. Build one on this machine with `python3 build.py dist`."
            % (built.get("implementation"), built.get("system"), built.get("machine"),
               here["implementation"], python, here["system"], here["machine"], sys.executable)
        )
        sys.exit(1)
    if python not in carried:
        _say(
            "this llmgw.pyz carries the compiled modules for CPython %s, not for %s (%s); run it "
            "with python%s, or build one that carries %s with `python3 build.py dist --python %s`."
            % (", ".join(carried), python, sys.executable, carried[-1] if carried else "3", python, python)
        )
        sys.exit(1)
    return "lib-cp%d%d" % sys.version_info[:2]


def _is_safe(path):
    """Whether code unpacked under path can be changed only by us (or root).

    Unpacked modules are imported, so a directory another user could write
    into, or whose parent they could rename it out of, is a way into every
    process that starts this archive — root's included, under sudo with a
    preserved HOME.
    """
    euid = os.geteuid()
    try:
        st = os.lstat(path)
        parent = os.stat(os.path.dirname(path))
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != euid or st.st_mode & 0o022:
        return False
    if parent.st_uid not in (euid, 0):
        return False
    # /tmp is writable by all, but its sticky bit stops others renaming ours.
    return not (parent.st_mode & 0o022) or bool(parent.st_mode & stat.S_ISVTX)


def _candidates():
    env = os.environ
    if env.get("LLMGW_PYZ_CACHE"):
        yield env["LLMGW_PYZ_CACHE"]
    # systemd's CacheDirectory= (the units set it): /var/cache/llmgw, owned
    # by the service's user, writable under ProtectSystem=strict.
    if env.get("CACHE_DIRECTORY"):
        yield env["CACHE_DIRECTORY"].split(":")[0]
    if env.get("XDG_CACHE_HOME"):
        yield os.path.join(env["XDG_CACHE_HOME"], "llmgw")
    home = env.get("HOME")
    if home and home != "/":
        yield os.path.join(home, ".cache", "llmgw")
    try:
        import pwd

        pw_home = pwd.getpwuid(os.geteuid()).pw_dir
    except (ImportError, KeyError):
        pw_home = None
    if pw_home and pw_home not in ("/", "/nonexistent") and pw_home != home:
        yield os.path.join(pw_home, ".cache", "llmgw")
    yield "/var/cache/llmgw"
    # Last: /tmp may be mounted noexec, where the native modules cannot be
    # mapped, and may be cleaned under a running service.
    yield os.path.join(tempfile.gettempdir(), "llmgw-pyz-%d" % os.geteuid())


def _cache_dir():
    for path in _candidates():
        path = os.path.abspath(path)
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            continue
        if _is_safe(path) and os.access(path, os.W_OK | os.X_OK):
            return path
    _say(
        "found no directory to unpack into that only this user can write: tried "
        "$LLMGW_PYZ_CACHE, $CACHE_DIRECTORY, $XDG_CACHE_HOME, ~/.cache, /var/cache/llmgw "
        "and %s. Set LLMGW_PYZ_CACHE to a directory of this user's." % tempfile.gettempdir()
    )
    sys.exit(1)


def _remove_stale(cache):
    now = time.time()
    try:
        names = os.listdir(cache)
    except OSError:
        return
    for name in names:
        if name.startswith(".unpacking-"):
            path = os.path.join(cache, name)
            try:
                if now - os.lstat(path).st_mtime > _STALE_S:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                pass


def _others(cache, final):
    """(time, path) of each other unpacked directory for final's Python here, the newest first."""
    suffix = final[final.rindex("-"):]
    found = []
    try:
        for name in os.listdir(cache):
            path = os.path.join(cache, name)
            if name.startswith("pyz-") and name.endswith(suffix) and path != final:
                try:
                    found.append((os.lstat(path).st_mtime, path))
                except OSError:
                    pass
    except OSError:
        return []
    return sorted(found, reverse=True)


def _prune(cache, final):
    """Remove this Python's unpacked versions past the newest _KEEP_EARLIER others that have gone unused for
    _UNUSED_S: each version of llmgw run here left one (120 MB), and nothing else ever removed them."""
    now = time.time()
    for used, path in _others(cache, final)[_KEEP_EARLIER:]:
        if now - used > _UNUSED_S:
            # Renamed first, so a start choosing a donor to link from never reads a half-removed tree.
            gone = os.path.join(cache, ".unpacking-removed-%d-%s" % (os.getpid(), os.path.basename(path)))
            try:
                os.rename(path, gone)
            except OSError:
                continue
            shutil.rmtree(gone, ignore_errors=True)


def _earlier_version(cache, final):
    """The newest other unpacked directory for this Python here, and its CONTENTS; ("", {}) when there is none."""
    for _, path in _others(cache, final):
        try:
            with open(os.path.join(path, CONTENTS)) as listed:
                contents = json.load(listed)
        except (OSError, ValueError):
            continue  # unpacked by a bootstrap that wrote no list, or being removed
        if isinstance(contents, dict):
            return path, contents
    return "", {}


def _linked(source, dest, size):
    """Whether dest is now a hard link to source (a plain file of ours of that size, never a link itself)."""
    try:
        st = os.lstat(source)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size != size:
            return False
        os.link(source, dest)
    except OSError:
        return False
    return True


def _unpack(zf, cache, final, dirs):
    """Unpack the archive's directories named in dirs into final, all at once or not at all.

    dirs maps a directory in the archive to one under final: lib/ to lib/,
    this version's lib-cpXY/ to itself, and lib-each/ (files the same in
    every lib-cpXY/, stored once) into this version's lib-cpXY/ as well.

    Into a temporary directory beside it first, then renamed: two processes
    starting together (a server and a mirror on one machine, a test that
    starts three) each unpack their own copy, one rename wins, and no process
    ever imports from a half-written tree.

    A file the same in an earlier version's directory here (same path, CRC-32,
    size and mode, as that directory's CONTENTS lists them) is linked to it
    rather than unpacked again: an upgrade changes llmgw and seldom its
    dependencies, and unpacking all 120 MB cost a new version's first start
    4 s of CPU, where linking costs a tenth of that. Only directories in this
    private cache are linked from, and nothing here writes into a file once
    it is unpacked.
    """
    _remove_stale(cache)
    donor, before = _earlier_version(cache, final)
    tmp = tempfile.mkdtemp(prefix=".unpacking-", dir=cache)
    contents = {}
    try:
        for info in zf.infolist():
            top, _, rel = info.filename.partition("/")
            if top not in dirs or info.is_dir():
                continue
            parts = [dirs[top]] + rel.split("/")
            if not rel or rel.startswith("/") or ".." in parts:
                raise OSError("unexpected member %r in the archive" % info.filename)
            dest = os.path.join(tmp, *parts)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            mode = ((info.external_attr >> 16) & 0o755) or 0o644
            key = "/".join(parts)
            contents[key] = [info.CRC, info.file_size, mode]
            if before.get(key) == contents[key] and _linked(os.path.join(donor, *parts), dest, info.file_size):
                continue
            with zf.open(info) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.chmod(dest, mode)
        with open(os.path.join(tmp, CONTENTS), "w") as listed:
            json.dump(contents, listed, separators=(",", ":"))
        os.chmod(tmp, 0o755)  # noqa: S103 - a folder of programs every user runs
        os.rename(tmp, final)
        _prune(cache, final)
    except OSError as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if os.path.isdir(final):
            return  # another start got there first; its copy is as good
        _say("could not unpack the archive into %s: %s" % (cache, error))
        sys.exit(1)


def _mark_used(final):
    """Say this version is in use (its directory's time), at most once an hour: what _prune keeps."""
    try:
        if time.time() - os.stat(final).st_mtime > _MARK_EVERY_S:
            os.utime(final)
    except OSError:
        pass


def main():
    archive = _archive_path()
    try:
        zf = zipfile.ZipFile(archive)
    except (OSError, zipfile.BadZipFile) as error:
        _say("cannot read the archive %s: %s" % (archive, error))
        sys.exit(1)
    with zf:
        compiled = _choose_version(zf)
        cache = _cache_dir()
        # One directory per archive and version: each unpacks only its own
        # compiled modules, and two versions on one machine share nothing
        # that either could be halfway through writing.
        final = os.path.join(cache, "pyz-%s-%s" % (_content_hash(zf), compiled[len("lib-"):]))
        if not os.path.isdir(final):
            _unpack(zf, cache, final, {"lib": "lib", "lib-each": compiled, compiled: compiled})
        else:
            _mark_used(final)

    # The unpacked tree replaces the archive on the path, so nothing is ever
    # imported from the zip by accident; this version's compiled modules
    # first, then what every version shares.
    sys.path[:] = [os.path.join(final, compiled), os.path.join(final, "lib")] + [
        p for p in sys.path if os.path.abspath(p or ".") != archive
    ]
    # For llmgw starting itself again (`llmgw sim-engine`, `llmgw
    # strata-serve`): [sys.executable, $LLMGW_PYZ, ...] is the same program.
    os.environ["LLMGW_PYZ"] = archive

    from llmgw.cli.main import main as llmgw_main

    sys.argv[0] = "llmgw"
    sys.exit(llmgw_main())


if __name__ == "__main__":
    main()
