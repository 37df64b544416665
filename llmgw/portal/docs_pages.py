"""/install and /docs: the install guide and the manual, served by every gateway (docs/portal.md, "The manual").

The pages are the program's own (llmgw.manualpages: the checkout's docs/, or the copy inside the built
program), so a gateway shows the manual of its own version, with no internet. /install is docs/setup.md:
from bare machines to a first answer, with the setup screens as the tmux test captured them
(tests/integration/test_setup_screens.py keeps them current). A page translated into the reader's language
(manual/<lang>/<page>.md) is shown in it; the others in English. Public: a person installing has no account
yet, and the manual says nothing a gateway keeps secret.
"""

from __future__ import annotations

import mimetypes
import re

from aiohttp import web

from llmgw.errors import N_
from llmgw.manualpages import manual_dir, page_file, pages
from llmgw.portal.markdown import render as markdown
from llmgw.portal.web import LANG, Viewer, add_nav, page, render, render_error

add_nav("main", "/docs", N_("Manual"), "member")

_IMAGE = re.compile(r"^[\w-]+\.(png|jpg|jpeg|gif|svg)$")
NO_PAGE = N_("There is no such page in the manual; the manual's first page lists them.")


@page("/install", public=True)
async def install(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    return _page(request, "setup")


@page("/docs", public=True)
async def index(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    folder = manual_dir()
    listed = [(name.removesuffix(".md"), title) for name, title in pages(folder)] if folder else []
    return render(request, "docs_index.html", title=N_("Manual"), pages=listed)


@page("/docs/{name}", public=True)
async def one(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    return _page(request, request.match_info["name"])


@page("/docs/img/{file}", public=True)
async def image(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    folder, name = manual_dir(), request.match_info["file"]
    path = folder / "img" / name if folder is not None and _IMAGE.match(name) else None
    if path is None or not path.is_file():
        return render_error(request, 404, NO_PAGE)
    kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return web.Response(body=path.read_bytes(), content_type=kind,
                        headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"})


def _page(request: web.Request, name: str) -> web.Response:
    folder = manual_dir()
    path = page_file(folder, name, request.get(LANG, "en")) if folder is not None else None
    if path is None:
        return render_error(request, 404, NO_PAGE)
    text = path.read_text(errors="replace")
    return render(request, "docs_page.html", title=N_("Manual"), body=markdown(text), name=name)
