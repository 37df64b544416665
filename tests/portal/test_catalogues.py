"""The portal's catalogues: every sentence marked for translation is extracted, and has its Turkish.

A failure here names the sentences. `python3 build.py locales` regenerates
locales/llmgw.pot and lists what a language lacks; the Turkish goes into
the part's own locales/tr/LC_MESSAGES/<part>.po (docs/building.md).
"""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from llmgw.portal import catalogues

ROOT = Path(__file__).resolve().parents[2]
LANGS = [lang for lang in catalogues.languages() if lang != "en"]

# Where refusals a person reads are raised, and the exceptions whose message must be an N_() literal.
# Part 6 adds control/catalog (Refusal), control/settings.py (SettingsError) and config/ (Invalid).
RAISED = [("llmgw/account", {"AccountError", "TreeError", "LimitError"})]

# The words a person meets on every page, each with the one Turkish word its every translation uses, so the
# usage table and the member's usage page do not call the same thing two names (issue 25: "belirteç" on one,
# "token" on the other). "Token" is two things: what a model counts (plural, or "N-token"), kept as "token"
# as Turkish AI writing does, and a credential (an ID or SCIM token: one, singular), a "jeton".
GLOSSARY = {
    "tr": [
        ("a model's tokens", r"\btokens\b|\bN-token\b", "token"),
        ("a credential token", r"(?<!-)\btoken\b", "jeton"),
        ("key", r"\bkeys?\b", "anahtar"),
        ("project", r"\bprojects?\b", "proje"),
        ("team", r"\bteams?\b", "ekip"),
        ("spend", r"\bspend\b", "harcama"),
    ],
}
# Sentences where the word is typed, not read (a command's value), so the Turkish keeps the English.
TYPED = {'"{kind}" is not a kind of place; write org, team or project'}


@pytest.fixture(scope="module")
def template():
    return catalogues.extract(ROOT)


def _entries(lang: str):
    for path in catalogues.po_files(lang):
        with path.open("rb") as po:
            for message in read_po(po, locale=lang):
                if message.id:
                    yield path, message


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def test_the_extracted_template_is_current(template):
    kept = (ROOT / "locales" / "llmgw.pot").read_text()

    assert catalogues.pot_text(template) == kept, (
        "locales/llmgw.pot is not what the code marks for translation now: run `python3 build.py locales` "
        "and commit it")


def test_turkish_is_one_of_the_languages():
    assert "tr" in LANGS


@pytest.mark.parametrize("lang", LANGS)
def test_every_sentence_has_a_translation(template, lang):
    absent = catalogues.missing(template, lang)

    assert not absent, (f"{lang} lacks {len(absent)} sentences; add them to your part's "
                        f"locales/{lang}/LC_MESSAGES/<part>.po:\n" + "\n".join(absent))


@pytest.mark.parametrize("lang", LANGS)
def test_no_translation_is_empty_or_fuzzy(lang):
    bad = [f"{path.name}: {m.id!r}" for path, m in _entries(lang) if not m.string or m.fuzzy]

    assert not bad, "empty or fuzzy entries:\n" + "\n".join(bad)


@pytest.mark.parametrize("lang", LANGS)
def test_a_translation_keeps_every_placeholder_of_its_sentence(lang):
    bad = [f"{path.name}: {m.id!r}" for path, m in _entries(lang) if _fields(m.id) != _fields(m.string)]

    assert not bad, "translations whose {placeholders} differ from the English:\n" + "\n".join(bad)


@pytest.mark.parametrize("lang", LANGS)
def test_two_parts_never_translate_one_sentence_two_ways(lang):
    seen: dict[str, tuple[str, str]] = {}
    clashes = []
    for path, m in _entries(lang):
        if m.id in seen and seen[m.id][1] != m.string:
            clashes.append(f"{m.id!r}: {seen[m.id][0]} and {path.name}")
        seen.setdefault(m.id, (path.name, m.string))

    assert not clashes, "one sentence, two translations:\n" + "\n".join(clashes)


def _read(text: str) -> str:
    """A sentence as read: placeholders as N (a {n}-token context), names (ORG/TEAM) and code taken out."""
    text = re.sub(r"\{[^}]*\}", "N", text)
    return re.sub(r"\S*[:_.=/]\S*|\b[a-z]+-[a-z-]+\b|\b[A-Z]{2,}\b", " ", text)


def _off_glossary(lang: str) -> list[str]:
    off = []
    for path, m in _entries(lang):
        if m.id in TYPED:
            continue
        for what, english, turkish in GLOSSARY[lang]:
            if re.search(english, _read(m.id), re.I) and turkish not in m.string.lower():
                off.append(f"{path.name}: {what} is \"{turkish}\": {m.id!r} -> {m.string!r}")
    return off


@pytest.mark.parametrize("lang", sorted(GLOSSARY))
def test_each_key_term_is_translated_the_same_way_in_every_part(lang):
    off = _off_glossary(lang)

    assert not off, "translations that name a key term otherwise than the glossary:\n" + "\n".join(off)


def test_the_glossary_check_finds_a_term_said_another_way(tmp_path, monkeypatch):
    part = tmp_path / "ops.po"
    part.write_text('msgid ""\nmsgstr ""\n\nmsgid "Tokens out"\nmsgstr "Çıkan belirteçler"\n\n'
                    'msgid "no token yet"\nmsgstr "henüz jeton yok"\n\n'
                    'msgid "Path: ORG/TEAM/PROJECT"\nmsgstr "Yol: ORG/TEAM/PROJECT"\n')
    monkeypatch.setattr(catalogues, "po_files", lambda lang: [part])

    assert _off_glossary("tr") == ["ops.po: a model's tokens is \"token\": 'Tokens out' -> 'Çıkan belirteçler'"]


def test_every_language_compiles_and_is_read_back():
    from llmgw.portal import i18n

    catalogues.compile_all()
    i18n.forget_catalogues()
    assert i18n.gettext("tr", "Sign in") == "Giriş yap"
    assert i18n.gettext("tr", "a sentence no one marked") == "a sentence no one marked"


def _unmarked_raises(folder: str, names: set[str]) -> list[str]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            called = node.exc.func
            name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", "")
            if name not in names or not node.exc.args:
                continue
            first = node.exc.args[0]
            marked = (isinstance(first, ast.Call) and isinstance(first.func, ast.Name) and first.func.id == "N_"
                      and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in first.args))
            # A wrapped error passes its template on; a name holds a template chosen from N_() literals.
            passed_on = isinstance(first, ast.Attribute) and first.attr == "template"
            if not (marked or passed_on or isinstance(first, ast.Name)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}({ast.unparse(first)[:60]}…)")
    return found


@pytest.mark.parametrize(("folder", "names"), RAISED)
def test_refusals_a_person_reads_are_raised_with_an_n_literal(folder, names):
    unmarked = _unmarked_raises(folder, names)

    assert not unmarked, ("raise these with N_(\"…{name}…\"), params={…} so the portal can translate them:\n"
                          + "\n".join(unmarked))


def test_the_check_for_unmarked_raises_finds_a_plain_string(tmp_path, monkeypatch):
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "m.py").write_text('def f(x):\n    raise AccountError(f"no {x}")\n'
                                 'def g():\n    raise AccountError(N_("fine"))\n')
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)

    assert [re.sub(r":\d+:", ":N:", line) for line in _unmarked_raises("pkg", {"AccountError"})] == [
        'pkg/m.py:N: AccountError(f\'no {x}\'…)']
