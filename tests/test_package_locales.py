"""An installed package speaks Turkish (issue 25, item 13).

The portal's catalogues are compiled from locales/ into llmgw/portal/locales/,
which git ignores; only build.py compiled them, so `pip install .` or a wheel
showed a Turkish browser English under lang="tr". setup.py's build_py now
compiles them into the package it builds. The test builds a wheel as pip does
(an isolated build, its requirements from pyproject.toml) from a copy of the
checkout's files as git sees them, so no catalogue compiled here can ride
along, installs it into a folder of its own, and asks a server started from
that install for the sign-in page in Turkish.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.support.servers import Server

ROOT = Path(__file__).resolve().parent.parent
MO = "llmgw/portal/locales/tr/LC_MESSAGES/llmgw.mo"

pytestmark = pytest.mark.integration


def clean_copy(to: Path) -> Path:
    """The checkout's files that git tracks or would add (not those it ignores, compiled catalogues included)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is listed and absent
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    assert not (to / MO).exists()
    return to


def test_a_wheel_of_a_clean_checkout_carries_turkish_and_its_server_answers_a_turkish_browser_in_turkish(
        tmp_path, monkeypatch):
    tree = clean_copy(tmp_path / "tree")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                            "--quiet", "--wheel-dir", str(tmp_path / "dist"), str(tree)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (tmp_path / "dist").glob("llmgw-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert MO in archive.namelist(), "the wheel has no Turkish catalogue"

    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
                                "--quiet", "--target", str(site), str(wheel)], capture_output=True, text=True,
                               timeout=120)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # The server runs from the install: its folder first on the path, and not started in the checkout,
    # whose llmgw `python -m` would otherwise find first. Its dependencies are this venv's.
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.chdir(tmp_path)
    found = subprocess.run([sys.executable, "-c", "import llmgw; print(llmgw.__file__)"], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert Path(found).is_relative_to(site), found

    server = Server(tmp_path, "gw")
    assert server.init().returncode == 0
    server.start()
    try:
        asked = urllib.request.Request(server.client_url + "/signin", headers={"Accept-Language": "tr-TR,tr;q=0.9"})
        with urllib.request.urlopen(asked, timeout=10) as answer:
            page = answer.read().decode()
    finally:
        server.stop()

    assert '<html lang="tr">' in page
    assert "Giriş yap" in page and "Parola" in page
    assert ">Sign in<" not in page and "Password" not in page
