"""GET /setup/vscode/llmgw.vsix: llmgw for VS Code, made for the address it is downloaded from.

Public: the package holds no secret, only this gateway's address as the extension's default, and the
command line `code --install-extension` fetches it with no session. The key comes later, from the Connect
page's "Open in VS Code" link (connect_pages.py) or llmgw: Enter API Key.
"""

from __future__ import annotations

import re

from aiohttp import web

from llmgw.errors import N_
from llmgw.portal.member import address
from llmgw.portal.vsix import build
from llmgw.portal.web import Viewer, page, render_error

# scheme://host[:port][/path]: what a browser or curl sends as Host, or portal.address. Anything else (a
# Host header with spaces, quotes or a user) would only be written into the asker's own copy, but it is
# refused all the same rather than made into a setting.
_GATEWAY = re.compile(r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+)(:\d{1,5})?(/[A-Za-z0-9._~\-/]*)?$")


@page("/setup/vscode/llmgw.vsix", role=None, public=True)
async def vsix(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    gateway = address(request)
    if not _GATEWAY.match(gateway):
        return render_error(request, 400, N_("This address cannot be written into the extension; download it "
                                             "through the gateway's own name or address."))
    return web.Response(body=build(gateway), content_type="application/vsix",
                        headers={"Content-Disposition": 'attachment; filename="llmgw.vsix"',
                                 "Cache-Control": "no-cache"})
