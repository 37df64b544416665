"""llmgw for VS Code as a .vsix, made for one gateway's address (GET /setup/vscode/llmgw.vsix).

A .vsix is a zip in the Open Packaging Conventions: [Content_Types].xml, extension.vsixmanifest, and the
extension's own files under extension/. The extension (llmgw/portal/vscode) is plain JavaScript with no
dependencies, so the gateway makes the package itself, with no build step and no marketplace: a site with
no internet installs it from its own gateway. What it writes is what `@vscode/vsce package` writes for the
same files (tests/portal/test_vsix.py has vsce check the unpacked extension, and code-server install the
package).
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from llmgw import __version__

SOURCE = Path(__file__).with_name("vscode")
# The files under extension/ (vsce writes the README as readme.md, which VS Code shows as the details page).
FILES = {"package.json": "package.json", "extension.js": "extension.js", "README.md": "readme.md",
         "LICENSE.txt": "LICENSE.txt"}
CONTENT_TYPES = (
    '<?xml version="1.0" encoding="utf-8"?>\n'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    + "".join(f'<Default Extension="{ext}" ContentType="{kind}"/>' for ext, kind in (
        (".js", "application/javascript"), (".json", "application/json"), (".md", "text/markdown"),
        (".txt", "text/plain"), (".vsixmanifest", "text/xml")))
    + "</Types>\n"
)
# Fixed timestamps: the same gateway and version give the same bytes.
STAMP = (1980, 1, 1, 0, 0, 0)


def extension_version(version: str = __version__) -> str:
    """llmgw's version as the MAJOR.MINOR.PATCH VS Code requires of an extension ("0.2.0rc1" is 0.2.0)."""
    parts = [int(n) for n in re.findall(r"\d+", version)[:3]]
    return ".".join(str(n) for n in (parts + [0, 0, 0])[:3])


def package_json(gateway: str, version: str = __version__) -> dict[str, Any]:
    """The extension's manifest, with this gateway as llmgw.gatewayUrl's default and llmgw's version."""
    package: dict[str, Any] = json.loads((SOURCE / "package.json").read_text(encoding="utf-8"))
    package["version"] = extension_version(version)
    package["contributes"]["configuration"]["properties"]["llmgw.gatewayUrl"]["default"] = gateway
    return package


def manifest(package: dict[str, Any]) -> str:
    """extension.vsixmanifest: the identity, the VS Code versions it takes, and where the manifest is."""
    properties = {
        "Microsoft.VisualStudio.Code.Engine": package["engines"]["vscode"],
        "Microsoft.VisualStudio.Code.ExtensionDependencies": "",
        "Microsoft.VisualStudio.Code.ExtensionPack": "",
        "Microsoft.VisualStudio.Code.ExtensionKind": "workspace",
        "Microsoft.VisualStudio.Code.LocalizedLanguages": "",
        "Microsoft.VisualStudio.Code.EnabledApiProposals": "",
        "Microsoft.VisualStudio.Code.ExecutesCode": "true",
        "Microsoft.VisualStudio.Services.GitHubFlavoredMarkdown": "true",
        "Microsoft.VisualStudio.Services.Content.Pricing": "Free",
    }
    lines = [
        '<?xml version="1.0" encoding="utf-8"?>',
        '<PackageManifest Version="2.0.0" xmlns="http://schemas.microsoft.com/developer/vsx-schema/2011" '
        'xmlns:d="http://schemas.microsoft.com/developer/vsx-schema-design/2011">',
        "  <Metadata>",
        f'    <Identity Language="en-US" Id={quoteattr(package["name"])} Version={quoteattr(package["version"])} '
        f'Publisher={quoteattr(package["publisher"])} />',
        f"    <DisplayName>{escape(package['displayName'])}</DisplayName>",
        f'    <Description xml:space="preserve">{escape(package["description"])}</Description>',
        f"    <Tags>{escape(','.join(package.get('keywords', [])))}</Tags>",
        f"    <Categories>{escape(','.join(package.get('categories', [])))}</Categories>",
        "    <GalleryFlags>Public</GalleryFlags>",
        "    <Properties>",
        *(f"      <Property Id={quoteattr(k)} Value={quoteattr(v)} />" for k, v in properties.items()),
        "    </Properties>",
        "    <License>extension/LICENSE.txt</License>",
        "  </Metadata>",
        "  <Installation>",
        '    <InstallationTarget Id="Microsoft.VisualStudio.Code"/>',
        "  </Installation>",
        "  <Dependencies/>",
        "  <Assets>",
        '    <Asset Type="Microsoft.VisualStudio.Code.Manifest" Path="extension/package.json" Addressable="true" />',
        '    <Asset Type="Microsoft.VisualStudio.Services.Content.Details" Path="extension/readme.md" '
        'Addressable="true" />',
        '    <Asset Type="Microsoft.VisualStudio.Services.Content.License" Path="extension/LICENSE.txt" '
        'Addressable="true" />',
        "  </Assets>",
        "</PackageManifest>",
    ]
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=16)
def build(gateway: str, version: str = __version__) -> bytes:
    """The .vsix for a gateway at `gateway` (scheme://host[:port], no /v1). Kept for the few addresses a
    gateway is reached at: the files never change while it runs."""
    package = package_json(gateway, version)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        def add(name: str, data: str) -> None:
            info = zipfile.ZipInfo(name, STAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data.encode("utf-8"))

        add("[Content_Types].xml", CONTENT_TYPES)
        add("extension.vsixmanifest", manifest(package))
        for source, name in FILES.items():
            text = (json.dumps(package, indent=2) + "\n" if source == "package.json"
                    else (SOURCE / source).read_text(encoding="utf-8"))
            add(f"extension/{name}", text)
    return out.getvalue()
