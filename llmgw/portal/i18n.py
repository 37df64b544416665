"""The portal's languages: which one a reader gets, their sentences, and their numbers and dates.

English is the source language: every msgid is the English sentence, so
English needs no catalogue. Other languages' sentences come from compiled
catalogues, llmgw/portal/locales/<lang>/LC_MESSAGES/llmgw.mo, which
`python3 build.py locales`/`run`/`test`/`dist` (and a bare pytest) compile
from every locales/<lang>/LC_MESSAGES/*.po of the checkout
(llmgw/portal/catalogues.py). A missing catalogue, or a sentence missing
from one, is shown in English rather than failing the page.
"""

from __future__ import annotations

import datetime as _dt
import gettext as _gettext
from functools import lru_cache
from importlib import resources

from babel import Locale, UnknownLocaleError
from babel import dates as _dates
from babel import numbers as _numbers

from llmgw.errors import ExpectedError

LANGUAGES = ("en", "tr")
DOMAIN = "llmgw"
NAMES = {"en": "English", "tr": "Türkçe"}  # each in its own language, for the language picker


def choose(accept_language: str, person_locale: str | None, default: str) -> str:
    """The reader's language: their own choice, else the browser's first we have, else `default`."""
    if person_locale in LANGUAGES:
        return person_locale
    for tag in _ranked(accept_language):
        base = tag.split("-", 1)[0]
        if base in LANGUAGES:
            return base
    return default if default in LANGUAGES else LANGUAGES[0]


def _ranked(header: str) -> list[str]:
    """Accept-Language's tags, most wanted first ("tr-TR,tr;q=0.9,en;q=0.8" -> tr-tr, tr, en)."""
    tags: list[tuple[float, int, str]] = []
    for index, part in enumerate(header.split(",")):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if tag and quality > 0:
            tags.append((-quality, index, tag.strip().lower()))
    return [tag for _, _, tag in sorted(tags)]


@lru_cache(maxsize=len(LANGUAGES))
def _catalogue(lang: str) -> _gettext.NullTranslations:
    """A language's compiled catalogue, read once per process; English, or none compiled, translates nothing."""
    if lang == "en":
        return _gettext.NullTranslations()
    path = resources.files("llmgw.portal").joinpath("locales", lang, "LC_MESSAGES", f"{DOMAIN}.mo")
    try:
        with path.open("rb") as mo:
            return _gettext.GNUTranslations(mo)
    except (FileNotFoundError, NotADirectoryError, OSError):
        return _gettext.NullTranslations()


def forget_catalogues() -> None:
    """Read the catalogues again on next use (after `build.py locales` compiled them anew, in tests)."""
    _catalogue.cache_clear()


def gettext(lang: str, msgid: str) -> str:
    """`msgid` in `lang`, or as it is when that language has no sentence for it."""
    if not msgid:
        return msgid
    return _catalogue(lang if lang in LANGUAGES else "en").gettext(msgid)


def say(lang: str, error: BaseException) -> str:
    """An error the program expects, as a sentence in `lang`: its template translated, then its params filled in."""
    if isinstance(error, ExpectedError) and error.template:
        translated = gettext(lang, error.template)
        if not error.params:
            return translated
        try:
            return translated.format(**error.params)
        except (KeyError, IndexError, ValueError):
            return str(error)  # a translation that names a parameter wrongly: the English is still right
    return str(error)


@lru_cache(maxsize=len(LANGUAGES))
def _locale(lang: str) -> Locale:
    try:
        return Locale.parse(lang if lang in LANGUAGES else "en")
    except (UnknownLocaleError, ValueError):
        return Locale.parse("en")


def number(lang: str, n: float) -> str:
    return _numbers.format_decimal(n, locale=_locale(lang))


def percent(lang: str, x: float) -> str:
    """A fraction as a percentage in `lang`'s way: 0.93 is 93% in English and %93 in Turkish."""
    return _numbers.format_percent(x, locale=_locale(lang))


def money(lang: str, micros: int) -> str:
    """Micro-units of the site's currency (docs/accounting.md) as an amount, without a currency sign,
    which the gateway does not know: two decimals at least, up to six for small sums.

    Written out from the integer with the language's symbols (as Babel's "#,##0.00####" gives them,
    which a test holds it to): a usage chart formats hundreds of amounts, and Babel took ~75 µs each,
    a third of /admin/usage's time (benchmarks/bench_portal.py)."""
    minus, group, point = _money_symbols(lang)
    whole, fraction = divmod(abs(int(micros)), 1_000_000)
    text = f"{whole:,}".replace(",", group) + point + f"{fraction:06d}".rstrip("0").ljust(2, "0")
    return minus + text if micros < 0 else text


@lru_cache(maxsize=8)  # one entry a language
def _money_symbols(lang: str) -> tuple[str, str, str]:
    """(minus, grouping, decimal point) in `lang`, read off Babel's own rendering of -1234.5."""
    shown = _numbers.format_decimal(-1234.5, format="#,##0.00####", locale=_locale(lang))
    one = shown.index("1")
    return shown[:one], shown[one + 1], shown[one + 5]


def date(lang: str, at: float) -> str:
    """A day in UTC, which is how usage is counted (docs/accounting.md)."""
    return _dates.format_date(_dt.datetime.fromtimestamp(at, _dt.UTC).date(), format="medium", locale=_locale(lang))


def datetime(lang: str, at: float) -> str:
    """A moment in UTC, saying so."""
    moment = _dt.datetime.fromtimestamp(at, _dt.UTC)
    return _dates.format_datetime(moment, format="medium", tzinfo=_dt.UTC, locale=_locale(lang)) + " UTC"
