"""The portal's translation catalogues: extracting the sentences, and compiling each language's.

English is the source language (each msgid is the English sentence), so
only other languages have catalogues. A checkout keeps them as PO files,
one per part of the portal, so that parts built side by side never edit
the same file:

    locales/llmgw.pot                       every sentence, extracted (build.py locales)
    locales/tr/LC_MESSAGES/frame.po         Turkish, the frame's sentences
    locales/tr/LC_MESSAGES/keys.po          … another part's

`compile_all` merges every .po of a language into one catalogue, written as
llmgw/portal/locales/<lang>/LC_MESSAGES/llmgw.mo (not in git), which
i18n.py reads. `python -m llmgw.portal.catalogues extract|compile|missing`
is what build.py runs; tests/conftest.py compiles stale catalogues too.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

DOMAIN = "llmgw"
PACKAGE = Path(__file__).resolve().parent  # llmgw/portal
CHECKOUT = PACKAGE.parent.parent  # the repository's root, where locales/ is
SOURCE = CHECKOUT / "locales"
TARGET = PACKAGE / "locales"

# Where sentences are marked: N_() anywhere in llmgw's Python (errors a person reads, page labels),
# _() in the portal's templates.
PYTHON_KEYWORDS = {"N_": None}
TEMPLATE_KEYWORDS = {"_": None}


def extract(root: Path = CHECKOUT) -> Catalog:
    """Every sentence marked for translation in the checkout at `root`, as a template catalogue."""
    catalog = Catalog(domain=DOMAIN, project="llmgw", fuzzy=False)
    python = extract_from_dir(
        root / "llmgw", method_map=[("**.py", "python")], keywords=PYTHON_KEYWORDS, comment_tags=("i18n:",),
        strip_comment_tags=True)
    templates = extract_from_dir(
        root / "llmgw" / "portal" / "templates", method_map=[("**.html", "jinja2.ext:babel_extract")],
        options_map={"**.html": {"trimmed": "true"}}, keywords=TEMPLATE_KEYWORDS, comment_tags=("i18n:",),
        strip_comment_tags=True)
    for filename, lineno, message, comments, context in [*python, *templates]:
        if isinstance(message, str) and message:
            catalog.add(message, locations=[(filename, lineno)], auto_comments=comments, context=context)
    return catalog


def pot_text(catalog: Catalog) -> str:
    """The .pot as written: sorted and without places or dates, so it changes only when a sentence does,
    and two branches that each add sentences touch it only where they add them."""
    out = io.BytesIO()
    write_po(out, catalog, omit_header=True, sort_output=True, no_location=True, width=0)
    return out.getvalue().decode()


def languages(source: Path = SOURCE) -> list[str]:
    return sorted(p.name for p in source.iterdir() if (p / "LC_MESSAGES").is_dir()) if source.is_dir() else []


def po_files(lang: str, source: Path = SOURCE) -> list[Path]:
    return sorted((source / lang / "LC_MESSAGES").glob("*.po"))


def merged(lang: str, source: Path = SOURCE) -> Catalog:
    """Every .po of a language as one catalogue: translated, not fuzzy entries only."""
    catalog = Catalog(locale=lang, domain=DOMAIN, fuzzy=False)
    for path in po_files(lang, source):
        with path.open("rb") as po:
            for message in read_po(po, locale=lang):
                if message.id and message.string and not message.fuzzy and message.id not in catalog:
                    catalog.add(message.id, message.string, context=message.context)
    return catalog


def compile_all(source: Path = SOURCE, target: Path = TARGET) -> dict[str, int]:
    """Compile each language's .po files into one llmgw.mo; how many sentences each has."""
    counts = {}
    for lang in languages(source):
        catalog = merged(lang, source)
        out = target / lang / "LC_MESSAGES" / f"{DOMAIN}.mo"
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".mo.partial")
        with partial.open("wb") as mo:
            write_mo(mo, catalog)
        partial.replace(out)  # a page reading it meanwhile sees the old or the new, never half
        counts[lang] = len(catalog)
    return counts


def stale(source: Path = SOURCE, target: Path = TARGET) -> bool:
    """Whether some language's compiled catalogue is missing or older than one of its .po files."""
    for lang in languages(source):
        mo = target / lang / "LC_MESSAGES" / f"{DOMAIN}.mo"
        if not mo.exists():
            return True
        built = mo.stat().st_mtime
        if any(po.stat().st_mtime > built for po in po_files(lang, source)):
            return True
    return False


def missing(template: Catalog, lang: str, source: Path = SOURCE) -> list[str]:
    """The template's sentences that `lang` has no translation for."""
    have = merged(lang, source)
    return sorted(m.id for m in template if isinstance(m.id, str) and m.id and m.id not in have)


def _say(lines: Iterable[str]) -> None:
    for line in lines:
        print(line, flush=True)


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "compile":
        counts = compile_all()
        _say(f"locales: compiled {lang} ({n} sentences) into {TARGET.relative_to(CHECKOUT)}/{lang}"
             for lang, n in counts.items())
        return 0
    if command in ("extract", "missing"):
        template = extract()
        pot = SOURCE / f"{DOMAIN}.pot"
        if command == "extract":
            SOURCE.mkdir(exist_ok=True)
            pot.write_text(pot_text(template))
            _say([f"locales: {len(template)} sentences in {pot.relative_to(CHECKOUT)}"])
        lacking = 0
        for lang in languages():
            absent = missing(template, lang)
            lacking += len(absent)
            if absent:
                _say([f"locales: {lang} lacks {len(absent)}; add them to your part's "
                      f"locales/{lang}/LC_MESSAGES/<part>.po:"])
                _say(f'  msgid "{text}"' for text in absent)
        return 1 if lacking and command == "missing" else 0
    print("usage: python -m llmgw.portal.catalogues extract|compile|missing", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
