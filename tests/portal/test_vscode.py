"""llmgw for VS Code as the portal serves it: the .vsix made for this gateway (llmgw/portal/vsix.py), checked by
@vscode/vsce itself, and the Connect page's VS Code tool with its Open in VS Code link."""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.portal.members import PASSWORD, Plane, Text, app, csrf_of, seed, sign_in, with_address

CHECKOUT = Path(__file__).resolve().parents[2]
VSCE = CHECKOUT / "tests" / "support" / "vscode" / "node_modules" / ".bin" / "vsce"
MANIFEST_NS = {"v": "http://schemas.microsoft.com/developer/vsx-schema/2011"}
STATE = "6f1c0d2e9a8b7c6d5e4f3a2b1c0d9e8f"  # as llmgw: Sign In makes one: 16 random bytes in hex


@pytest.fixture
def dialect() -> str:
    """SQLite alone: what is served does not depend on the store's dialect (making a key on both is
    test_connect.py's)."""
    return "sqlite"


@pytest.fixture
async def world(store):
    return await seed(store)


@pytest.fixture
async def anyone(store, world):
    client = TestClient(TestServer(app(Plane(store))))
    await client.start_server()
    yield client
    await client.close()


@pytest.fixture
async def ada(anyone):
    anyone.csrf = await sign_in(anyone, "ada@example.com")
    return anyone


def unpacked(vsix: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(vsix)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def manifest_facts(xml: bytes) -> dict:
    root = ET.fromstring(xml)
    identity = root.find("v:Metadata/v:Identity", MANIFEST_NS)
    return {"identity": dict(identity.attrib),
            "properties": {p.get("Id"): p.get("Value")
                           for p in root.findall("v:Metadata/v:Properties/v:Property", MANIFEST_NS)},
            "target": [t.get("Id") for t in root.findall("v:Installation/v:InstallationTarget", MANIFEST_NS)],
            "assets": sorted((a.get("Type"), a.get("Path")) for a in root.findall("v:Assets/v:Asset", MANIFEST_NS))}


async def test_anyone_downloads_the_extension_made_with_the_address_it_was_fetched_from(anyone):
    answer = await anyone.get("/setup/vscode/llmgw.vsix")

    assert answer.status == 200 and answer.content_type == "application/vsix"
    assert answer.headers["Content-Disposition"] == 'attachment; filename="llmgw.vsix"'
    files = unpacked(await answer.read())
    assert sorted(files) == ["[Content_Types].xml", "extension.vsixmanifest", "extension/LICENSE.txt",
                             "extension/extension.js", "extension/package.json", "extension/readme.md"]
    package = json.loads(files["extension/package.json"])
    setting = package["contributes"]["configuration"]["properties"]["llmgw.gatewayUrl"]
    assert setting["default"] == f"http://{anyone.server.host}:{anyone.server.port}"
    assert setting["scope"] == "machine"  # a workspace (a cloned repository) cannot point it elsewhere
    assert package["contributes"]["languageModelChatProviders"][0]["vendor"] == "llmgw"
    facts = manifest_facts(files["extension.vsixmanifest"])
    assert facts["identity"] == {"Language": "en-US", "Id": "llmgw", "Version": package["version"],
                                 "Publisher": "llmgw"}
    assert facts["properties"]["Microsoft.VisualStudio.Code.Engine"] == package["engines"]["vscode"]


async def test_with_portal_address_set_the_extension_points_at_it(store, world):
    client = TestClient(TestServer(app(Plane(store, with_address("https://llm.example.com/v1")))))
    await client.start_server()
    try:
        files = unpacked(await (await client.get("/setup/vscode/llmgw.vsix")).read())
    finally:
        await client.close()
    package = json.loads(files["extension/package.json"])
    assert package["contributes"]["configuration"]["properties"]["llmgw.gatewayUrl"]["default"] == (
        "https://llm.example.com")


async def test_a_host_header_that_is_no_address_is_refused_not_written_into_the_extension(anyone):
    answer = await anyone.get("/setup/vscode/llmgw.vsix", headers={"Host": 'evil" x'})

    assert answer.status == 400
    assert "cannot be written into the extension" in Text(await answer.text()).text


async def test_vsces_own_checks_accept_the_extension_and_its_package_is_the_one_vsce_makes(anyone, tmp_path):
    files = unpacked(await (await anyone.get("/setup/vscode/llmgw.vsix")).read())
    folder = tmp_path / "extension"
    folder.mkdir()
    for name, data in files.items():
        if name.startswith("extension/"):
            (folder / name.removeprefix("extension/")).write_bytes(data)

    listed = subprocess.run([str(VSCE), "ls"], cwd=folder, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert sorted(listed.stdout.split()) == ["LICENSE.txt", "extension.js", "package.json", "readme.md"]
    made = subprocess.run([str(VSCE), "package", "--allow-missing-repository", "-o", str(tmp_path / "vsce.vsix")],
                          cwd=folder, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    theirs = unpacked((tmp_path / "vsce.vsix").read_bytes())
    assert sorted(theirs) == sorted(files)
    assert theirs["[Content_Types].xml"] == files["[Content_Types].xml"]
    assert manifest_facts(theirs["extension.vsixmanifest"]) == manifest_facts(files["extension.vsixmanifest"])
    assert json.loads(theirs["extension/package.json"]) == json.loads(files["extension/package.json"])


async def test_the_connect_page_offers_vs_code_first_with_the_download_and_the_install_line(ada):
    page = await (await ada.get("/connect")).text()

    tools = re.findall(r'href="/connect\?tool=(\w+)', page)
    assert tools[0] == "vscode"
    lines = Text(page).by_id["snippet-1"].splitlines()
    base = f"http://{ada.server.host}:{ada.server.port}"
    assert shlex.split(lines[0]) == ["curl", "-fLo", "llmgw.vsix", f"{base}/setup/vscode/llmgw.vsix"]
    assert lines[1] == "code --install-extension llmgw.vsix --force"
    assert "snippet-key" not in Text(page).by_id  # the extension keeps the key, not the shell


async def test_a_key_made_for_vs_code_comes_with_an_open_in_vs_code_link_carrying_the_sign_ins_state(
        ada, store, world):
    page = await (await ada.get(f"/connect?tool=vscode&state={STATE}")).text()
    made = await ada.post("/connect", data={"_csrf": csrf_of(page), "tool": "vscode", "state": STATE,
                                             "project": world.paths["Acme/eng/web"].project.id},
                          allow_redirects=False)

    text = await made.text()
    assert made.status == 201 and made.headers["Cache-Control"] == "no-store"
    secret = Text(text).by_id["secret"]
    link = re.search(r'id="open-in-vscode" href="([^"]+)"', text).group(1).replace("&amp;", "&")
    parts = urlsplit(link)
    assert (parts.scheme, parts.netloc, parts.path) == ("vscode", "llmgw.llmgw", "/signin")
    assert parse_qs(parts.query) == {"gateway": [f"http://{ada.server.host}:{ada.server.port}"], "key": [secret],
                                     "state": [STATE]}
    (key,) = await store.list_keys(person_id=world.ada["id"])
    assert key.name == "VS Code" and secret.startswith(key.prefix)


async def test_a_state_that_is_not_one_the_extension_makes_is_dropped_and_the_link_is_confirmed_in_vs_code(
        ada, world):
    page = await (await ada.get('/connect?tool=vscode&state="><script>')).text()
    assert "<script>" not in page and 'name="state"' not in page
    made = await ada.post("/connect", data={"_csrf": csrf_of(page), "tool": "vscode", "state": "x y",
                                             "project": world.paths["Acme/eng/web"].project.id})
    link = re.search(r'id="open-in-vscode" href="([^"]+)"', await made.text()).group(1).replace("&amp;", "&")
    assert "state" not in parse_qs(urlsplit(link).query)


async def test_signing_in_on_the_way_keeps_the_vs_code_tool_and_the_state(anyone):
    first = await anyone.get(f"/connect?tool=vscode&state={STATE}", allow_redirects=False)
    assert first.status == 303
    form = await (await anyone.get(first.headers["Location"])).text()
    next_ = re.search(r'name="next" value="([^"]+)"', form).group(1).replace("&amp;", "&")
    signed = await anyone.post("/signin", data={"_csrf": csrf_of(form), "email": "ada@example.com",
                                                "password": PASSWORD, "next": next_},
                               allow_redirects=False)
    assert signed.headers["Location"] == f"/connect?tool=vscode&state={STATE}"


def test_the_extension_module_is_plain_javascript_that_needs_nothing_but_node_and_vs_code():
    source = CHECKOUT / "llmgw" / "portal" / "vscode" / "extension.js"
    checked = subprocess.run(["node", "--check", str(source)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    builtin = subprocess.run(["node", "-p", "JSON.stringify(require('module').builtinModules)"],
                             capture_output=True, text=True, timeout=60, check=True)
    required = set(re.findall(r"require\('([^']+)'\)", source.read_text()))
    assert required - {"vscode"} <= set(json.loads(builtin.stdout)), required
