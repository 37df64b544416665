"""The manual's pages: docs/*.md of a checkout, or the copy inside the built program (llmgw/manual/).

What the console's Manual screen and the portal's /docs read. build.py dist
copies docs/*.md and docs/img/ into the package as llmgw/manual/, which the
archive unpacks with the rest of llmgw; the package's own copy comes first,
so an installed program shows the pages of its own version. A translated
page, where there is one, is manual/<language>/<page>.md.

Bottom floor (docs/internals.md): no llmgw imports, so any package may ask.
"""

from __future__ import annotations

import re
from pathlib import Path

PAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")  # a page's name as a URL says it: never a path


def manual_dir() -> Path | None:
    here = Path(__file__).resolve().parent
    for candidate in (here / "manual", here.parent / "docs"):
        if any(candidate.glob("*.md")):
            return candidate
    return None


def pages(folder: Path) -> list[tuple[str, str]]:
    """(file name, its title: the first heading) for each page, by file name."""
    found = []
    for path in sorted(folder.glob("*.md")):
        found.append((path.name, title_of(path.read_text(errors="replace"), path.stem)))
    return found


def title_of(text: str, default: str) -> str:
    return next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("# ")), default)


def page_file(folder: Path, name: str, lang: str = "en") -> Path | None:
    """The page called `name` (no suffix), in `lang` where it is translated, else in English; None for none."""
    if not PAGE_NAME.match(name):
        return None
    if lang != "en" and re.fullmatch(r"[a-z]{2}", lang):
        translated = folder / lang / f"{name}.md"
        if translated.is_file():
            return translated
    found = folder / f"{name}.md"
    return found if found.is_file() else None
