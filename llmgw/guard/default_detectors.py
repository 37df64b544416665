"""llmgw's own detectors, registered through the same seam a site's would use.

Every one runs on the hot path of every request a policy covers, and most
texts contain none of what they look for, so each starts with a check that
costs a substring search in C (a key's fixed prefix, an "@", a digit) and
only then runs its regular expressions. Measured by benchmarks/bench_guard.py.
"""

from __future__ import annotations

import re

from llmgw.guard import detectors
from llmgw.guard.detectors import Match
from llmgw.guard.national_ids import NationalIdDetector

_ANY_DIGIT = re.compile(r"\d")


def _digits(text: str) -> int:
    """How many ASCII digits `text` has: ten counts in C, cheaper than a pattern trying every digit."""
    return sum(map(text.count, "0123456789"))


# -- what may still be in progress at an answer's end -------------------------
#
# A streamed answer is released as it comes, less what may still become a
# value a rule finds (llmgw/guard/gate.py). Each detector's `pending(text)`
# says where that is: the index in `text` from which its end could be the
# beginning of a value, or len(text) when nothing there could be. A value is
# a bounded run of characters (digits and separators, a key's characters, an
# address's), so what is held is that run and never more.

_ASCII_DIGITS = frozenset("0123456789")


def _run_start(text: str, chars: frozenset[str] | str) -> int:
    """Where the run of `chars` that ends `text` begins (len(text) when `text` does not end in one)."""
    i = len(text)
    while i > 0 and text[i - 1] in chars:
        i -= 1
    return i


def _number_pending(text: str, separators: str, most_digits: int) -> int:
    """Where a number that may go on begins at `text`'s end: its digits, with one of `separators` between
    them or after the last; len(text) when `text` does not end in one, or it is already too long to be one."""
    i = len(text)
    if i and text[i - 1] in separators:
        i -= 1  # "4111 " may go on with "1111"
    if not i or text[i - 1] not in _ASCII_DIGITS:
        return len(text)
    j, digits = i, 0
    while j > 0:
        c = text[j - 1]
        if c in _ASCII_DIGITS:
            digits += 1
        elif not (c in separators and j >= 2 and text[j - 2] in _ASCII_DIGITS):
            break
        j -= 1
    return j if digits <= most_digits else len(text)


# -- secrets ------------------------------------------------------------------

# (name, substrings one of which must be in the text, pattern, group holding
# the secret, characters that may not come just before the match). The group
# matters where the secret is part of what is matched: "Bearer [SECRET_1]"
# and "postgres://app:[SECRET_1]@db" keep what the text was about and take
# out only the secret. Every pattern starts with a literal or a character
# class, never a look-behind: Python's re then skips to the candidates in C
# (a look-behind first made each pattern try every position, 5x slower).
_WORDISH = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_SECRETS: list[tuple[str, tuple[str, ...], re.Pattern[str], int, frozenset[str]]] = [
    ("anthropic", ("sk-ant-",), re.compile(r"sk-ant-[A-Za-z0-9_-]{20,}"), 0, _WORDISH),
    ("llmgw", ("sk-llmgw-",), re.compile(r"sk-llmgw-[0-9A-Za-z]{20,}"), 0, _WORDISH),
    ("openai", ("sk-",), re.compile(r"sk-(?!ant-|llmgw-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"), 0, _WORDISH),
    ("aws", ("AKIA", "ASIA"), re.compile(r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])"), 0, _WORDISH),
    ("aws", ("ecret", "ECRET"), re.compile(
        r"[Aa][Ww][Ss]_?(?i:secret_?(?:access_?)?key)[\"']?\s*[=:]\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"),
     1, frozenset()),
    ("github", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
     re.compile(r"gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255}"), 0, _WORDISH),
    ("gitlab", ("glpat-",), re.compile(r"glpat-[A-Za-z0-9_-]{20,}"), 0, _WORDISH),
    ("slack", ("xox",), re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}"), 0, _WORDISH),
    ("google", ("AIza",), re.compile(r"AIza[0-9A-Za-z_-]{35}"), 0, _WORDISH),
    ("stripe", ("_live_",), re.compile(r"[sr]k_live_[0-9A-Za-z]{20,}"), 0, _WORDISH),
    ("huggingface", ("hf_",), re.compile(r"hf_[A-Za-z0-9]{30,}"), 0, _WORDISH),
    # A key cut off by a paste (no END line) is still a key: to the end of the text.
    ("private_key", ("PRIVATE KEY",), re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"), 0, frozenset()),
    ("bearer_token", ("earer", "EARER"), re.compile(r"[Bb](?i:earer)\s+([A-Za-z0-9._~+/-]{16,}=*)"), 1, _WORDISH),
]
# A password in a URL (scheme://user:password@host) is found from its "://".
_URL_USER = re.compile(r"[^\s:/@]{1,128}:([^\s/@]{1,256})@[\w.-]")


# How the keys above begin, for `pending`: a run ending in one of these, or in
# the beginning of one ("gh", "sk"), may be a key still being written.
_SECRET_HEADS = ("sk-", "AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox",
                 "AIza", "sk_live_", "rk_live_", "hf_", "-----BEGIN")
# Every beginning of a head ("g", "gh", "ghp"), so that a run is looked up, not compared with each.
_HEAD_STARTS = frozenset(head[:n] for head in _SECRET_HEADS for n in range(1, len(head) + 1))
_LONGEST_HEAD = max(map(len, _SECRET_HEADS))
# A value named by what comes before it: a bearer token, an AWS secret key.
_NAMED_VALUE = re.compile(r"(?:[Bb](?i:earer)\s+|(?i:secret_?(?:access_?)?key)[\"']?\s*[=:]\s*[\"']?)\S*\Z")


class SecretsDetector:
    kind = "secrets"

    def pending(self, text: str) -> int:
        """Where a key may still be being written at `text`'s end: the run of characters that are not
        spaces ending it, when it holds a URL's "://", follows a "Bearer" or an AWS secret's name, or
        has a key's head (or the beginning of one) where a key may begin; a private key's block until
        its END line."""
        begin = text.rfind("-----BEGIN")
        if begin != -1 and "-----END" not in text[begin:]:
            return begin
        if not text or text[-1].isspace():
            return len(text)
        run = text.rsplit(None, 1)[-1]
        start = len(text) - len(run)
        if "://" in run or run.endswith((":", ":/")):
            return start
        named = text[max(0, start - 48):start]
        if ("earer" in named or "EARER" in named or "ecret" in named or "ECRET" in named) and \
                _NAMED_VALUE.search(text, max(0, start - 48)):
            return start
        for i in range(start, len(text)):
            if i > start and text[i - 1] in _WORDISH:
                continue  # a key never begins right after a letter or a digit (not_after)
            if text[i:i + _LONGEST_HEAD] in _HEAD_STARTS or text.startswith(_SECRET_HEADS, i):
                return i
        return len(text)

    def find(self, text: str) -> list[Match]:
        found = []
        for name, hints, regex, group, not_after in _SECRETS:
            for hint in hints:
                if hint in text:
                    break
            else:
                continue
            for m in regex.finditer(text):
                if m.start() and text[m.start() - 1] in not_after:
                    continue
                found.append(Match(self.kind, f"secrets:{name}", m.start(group), m.end(group), m.group(group)))
        at = text.find("://")
        while at > 0:
            if text[at - 1].isalnum():
                user = _URL_USER.match(text, at + 3)
                if user:
                    found.append(Match(self.kind, "secrets:url_password", user.start(1), user.end(1), user.group(1)))
            at = text.find("://", at + 3)
        return found


# -- payment cards ------------------------------------------------------------

# A run of 13–19 digits with at most one space or dash between them, and no
# digit just before or after the run, so a card is never found inside a
# longer number (an IBAN's digits, a tracking number).
_CARD = re.compile(r"\d(?<!\d\d)(?<!\d[ -]\d)(?:[ -]?\d){12,18}(?![ -]?\d)", re.ASCII)
# Issuers' first digits (Visa 4, Mastercard 51–55 and 22–27, Amex 34/37,
# Discover 6011/65, Diners 30/36/38, JCB 35, UnionPay 62, Maestro 50/56–69,
# Troy 9792). Numbers starting 0, 1, 7 or 8 are order and tracking numbers.
_CARD_PREFIX = re.compile(r"4|5[0-9]|2[2-7]|3[0-9]|6|9792")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = ord(c) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


class CardsDetector:
    kind = "cards"

    def __init__(self, known_prefixes: bool = True):
        self.known_prefixes = known_prefixes

    def pending(self, text: str) -> int:
        """A run of digits (one space or dash between them) ending `text` may still become a card."""
        return _number_pending(text, " -", 19)

    def find(self, text: str) -> list[Match]:
        if _digits(text) < 13:
            return []
        found = []
        for m in _CARD.finditer(text):
            digits = m.group().replace(" ", "").replace("-", "")
            if self.known_prefixes and not _CARD_PREFIX.match(digits):
                continue
            if luhn_ok(digits):
                found.append(Match(self.kind, "cards", m.start(), m.end(), m.group()))
        return found


# -- e-mail -------------------------------------------------------------------

# Found from each "@" outwards rather than by one pattern over the text: a
# pattern that starts with the local part tries every word of the text, and
# a long token (a base64 blob) makes that quadratic.
_LOCAL_REVERSED = re.compile(r"[\w.%+-]{1,64}")
_DOMAIN = re.compile(r"[\w-]+(?:\.[\w-]+)*\.[^\W\d_]{2,}")


_ADDRESS_CHARS = re.compile(r"[\w.%+@-]*\Z")


class EmailDetector:
    kind = "email"

    def pending(self, text: str) -> int:
        """Any word ending `text` may be an address's local part until what follows it is not."""
        return _ADDRESS_CHARS.search(text).start()  # type: ignore[union-attr]

    def find(self, text: str) -> list[Match]:
        found = []
        at = text.find("@")
        while at != -1:
            # The local part, read backwards from the "@".
            local = _LOCAL_REVERSED.match(text[max(0, at - 64):at][::-1])
            domain = _DOMAIN.match(text, at + 1)
            if local and domain:
                start = at - local.end()
                while start < at and text[start] in ".-":
                    start += 1
                if start < at:
                    found.append(Match(self.kind, "pii:email", start, domain.end(), text[start:domain.end()]))
                    at = text.find("@", domain.end())
                    continue
            at = text.find("@", at + 1)
        return found


# -- phone numbers ------------------------------------------------------------

# A phone number is only taken in a shape people write phone numbers in:
#   - international, with a plus (or 00): +90 532 123 45 67, +49 30 1234567, 0044 20 7946 0958
#   - national, with the trunk 0: 0532 123 45 67, (0212) 555 55 55, 030/1234567, 06 12 34 56 78
#   - North American with the area code in brackets: (555) 123-4567
# Bare digit runs that do not start with 0 are never phones: that leaves
# out "555-123-4567" and Italian and Spanish numbers written without +39/+34,
# and keeps order numbers, amounts and years out. Dates written with dots or
# dashes (05.11.2023) have the shape of a national number and are refused by
# _DATE; a compact 00… run is an account number, not a call.
_INTL = r"[1-9]\d{0,2}(?:[ .-]?\(?\d{1,4}\)?){2,5}"
_NATIONAL = r"[1-9]\d{0,3}\)?(?:[ .-]|/)?\d{2,4}(?:[ .-]?\d{2,4}){1,3}"
# Each branch starts with a literal, so re skips to a "+", "0" or "(" in C.
_PHONE = re.compile(
    rf"(?:\+{_INTL}|00{_INTL}|0{_NATIONAL}|\(0{_NATIONAL}|\(\d{{3}}\) ?\d{{3}}-\d{{4}})(?![\w])(?![.-]\d)", re.ASCII)
_DATE = re.compile(r"\d{1,2}([./-])\d{1,2}\1\d{2,4}")


class PhoneDetector:
    kind = "phone"

    def pending(self, text: str) -> int:
        """A number ending `text` in a phone number's shape (digits, spaces, dots, dashes, slashes,
        brackets, a leading + or 0) may go on."""
        start = _run_start(text, "0123456789 ()+-./")
        while start < len(text) and text[start] in " .-/)":
            start += 1
        run = text[start:]
        return start if any(c in run for c in "0123456789+(") else len(text)

    def find(self, text: str) -> list[Match]:
        if _digits(text) < 8:
            return []
        found = []
        for m in _PHONE.finditer(text):
            if m.start() and (text[m.start() - 1].isalnum() or text[m.start() - 1] in "_+#/.-"):
                continue
            value = m.group()
            digits = sum(c.isdigit() for c in value)
            if value[0] == "+" or value.startswith("00"):
                ok = 8 <= digits <= (15 if value[0] == "+" else 17)
            elif value[0] == "(" and value[1] != "0":
                ok = digits == 10
            else:
                ok = 9 <= digits <= 12 and not _DATE.match(value.lstrip("("))
            if ok:
                found.append(Match(self.kind, "pii:phone", m.start(), m.end(), value))
        return found


# -- IBAN ---------------------------------------------------------------------

IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24,
    "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21,
    "HU": 28, "IE": 22, "IL": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LI": 21,
    "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30,
    "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
    "SE": 24, "SI": 19, "SK": 24, "SM": 27, "TN": 24, "TR": 26, "UA": 29, "VG": 24, "XK": 20,
}
_IBAN = re.compile(r"([A-Z]{2})(?<![A-Za-z0-9][A-Z]{2})\d{2}(?: ?[A-Z0-9]){11,30}", re.ASCII)


def iban_ok(compact: str) -> bool:
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


# The beginning of an IBAN, to `text`'s end: two capitals, two digits, then
# capitals and digits with single spaces.
_IBAN_TAIL = re.compile(r"[A-Z](?:[A-Z](?:\d(?:\d(?: ?[A-Z0-9])*)?)?)? ?\Z", re.ASCII)


class IbanDetector:
    kind = "iban"

    def pending(self, text: str) -> int:
        found = _IBAN_TAIL.search(text, max(0, len(text) - 48))
        return found.start() if found else len(text)

    def find(self, text: str) -> list[Match]:
        if not _ANY_DIGIT.search(text):
            return []
        found = []
        for m in _IBAN.finditer(text):
            length = IBAN_LENGTHS.get(m.group(1))
            if length is None:
                continue
            # The pattern runs on into whatever follows ("… 26 IS MINE");
            # the country says how long its IBANs are, so cut there.
            end, count = m.start(), 0
            while count < length and end < m.end():
                if text[end] != " ":
                    count += 1
                end += 1
            if count != length or (end < len(text) and text[end].isalnum()):
                continue
            value = text[m.start():end]
            if iban_ok(value.replace(" ", "")):
                found.append(Match(self.kind, "pii:iban", m.start(), end, value))
        return found


# -- person names -------------------------------------------------------------

# Letters by case, Latin (with Turkish İ, ş, ğ), Greek and Cyrillic: Python's
# re has no \p{Lu}, and [A-Z] would miss "Ayşe Yılmaz" and "Łukasz Żółw".
_UPPER = "".join(chr(c) for c in range(0x41, 0x530) if chr(c).isupper() and chr(c).isalpha())
_LOWER = "".join(chr(c) for c in range(0x61, 0x530) if chr(c).islower() and chr(c).isalpha())
_WORD = f"[{_UPPER}][{_LOWER}]+(?:[-'’][{_UPPER}]?[{_LOWER}]+)?"
_CUES = (r"Mr|Mrs|Ms|Miss|Dr|Prof|Sir|Madam|Mx|Bay|Bayan|Sayın|Sn|Herr|Frau|Mme|Mlle|Sr|Sra|Srta|Sig|Sig\.ra"
         r"|Dott|Pan|Pani|Dhr|Mevr")
_CUED = re.compile(rf"(?:{_CUES})\.?[ \t]+({_WORD}(?:[ \t]+{_WORD}){{0,2}})")
_PAIR = re.compile(rf"({_WORD}(?:[ \t]+{_WORD}){{1,2}})(?![\w])")
# Capitalised pairs that are seldom names, however often they are capitalised.
_NOT_NAMES = frozenset("""
I The A An This That These Those My Our Your His Her Their Its We You He She They It Dear Hi Hello Thanks Please
New North South East West United Saint San Santa Los Las El La Le De Der Die Das Bir Bu Şu Ve Ile İle
Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June July August
September October November December Pazartesi Salı Çarşamba Perşembe Cuma Cumartesi Pazar Ocak Şubat Mart
Nisan Mayıs Haziran Temmuz Ağustos Eylül Ekim Kasım Aralık
""".split())  # noqa: SIM905 - words read as prose here, split once at import
_ONE_WORD = re.compile(_WORD)
_PERSON_TAIL = re.compile(rf"(?:[{_UPPER}][{_LOWER}'’-]*[ \t]+)*[{_UPPER}][{_LOWER}'’-]*[ \t]*\Z")
_SENTENCE_END = ".!?:;\n\"“”«»()[]"


class PersonDetector:
    """Names, by a heuristic: only where a rule asks for it (`pii.person`), as it errs both ways.

    Taken: one to three Capitalised words after a title (Mr, Dr, Bay, Bayan,
    Sayın, Herr, …), anywhere; and two or three Capitalised words side by
    side that do not start a sentence. Missed: a name alone ("ask Ayşe"),
    or at a sentence's start. Wrongly taken: places and organisations in the
    middle of a sentence ("we met at Hacker News"), less the common words
    _NOT_NAMES lists.
    """

    kind = "person"

    def pending(self, text: str) -> int:
        """Capitalised words ending `text` may be the beginning of a name."""
        found = _PERSON_TAIL.search(text, max(0, len(text) - 160))
        return found.start() if found else len(text)

    def find(self, text: str) -> list[Match]:
        found: list[Match] = []
        for m in _CUED.finditer(text):
            if m.start() and text[m.start() - 1].isalnum():
                continue
            found.append(Match(self.kind, "pii:person", m.start(1), m.end(1), m.group(1)))
        cued = [(m.start, m.end) for m in found]
        for m in _PAIR.finditer(text):
            if m.start() and text[m.start() - 1].isalnum():
                continue
            if any(s < m.end() and m.start() < e for s, e in cued):
                continue
            words = [(w.start(), w.end()) for w in _ONE_WORD.finditer(text, m.start(1), m.end(1))]
            # The first word of a sentence is capitalised whatever it is:
            # "Ask Ayşe Yılmaz" is a name of two words, not three.
            i = words[0][0] - 1
            while i >= 0 and text[i] in " \t":
                i -= 1
            if i < 0 or text[i] in _SENTENCE_END:
                words = words[1:]
            while words and text[words[0][0]:words[0][1]] in _NOT_NAMES:
                words = words[1:]
            for i, (s, e) in enumerate(words):
                if text[s:e] in _NOT_NAMES:
                    words = words[:i]
                    break
            if len(words) >= 2:
                start, end = words[0][0], words[-1][1]
                found.append(Match(self.kind, "pii:person", start, end, text[start:end]))
        return found


# -- injection ----------------------------------------------------------------

# Phrases that try to take the system prompt's place, English and Turkish.
# They are matched on the text lower-cased; one of _INJECTION_HINTS must be
# in it first, which most texts fail at the cost of a few substring searches.
_INJECTION_HINTS = ("ignore", "disregard", "forget", "override", "bypass", "you are now", "do anything now",
                    "developer mode", "jailbreak", "system prompt", "pretend", "talimat", "yok say",
                    "görmezden", "unut", "artık", "sistem istem", "kısıtlama", "kurallar")
_INJECTION = re.compile("|".join([
    r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|every\s+)?(?:of\s+)?(?:the\s+|your\s+|my\s+)?"
    r"(?:previous|prior|above|earlier|preceding|original|initial|system)\s+"
    r"(?:instructions?|prompts?|rules|directions|guidelines|messages?|context)",
    r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:the\s+|your\s+)?system\s+(?:prompt|message|instructions?)",
    r"\b(?:ignore|disregard|forget)\s+(?:all\s+|everything\s+)?(?:you\s+(?:were|have\s+been)\s+told|your\s+instructions)",
    r"\byou\s+are\s+now\s+(?:dan\b|in\s+developer\s+mode|an?\s+unrestricted|jailbroken|free\s+of)",
    r"\b(?:act\s+as|pretend\s+to\s+be|you\s+are)\s+dan\b",
    r"\bdo\s+anything\s+now\b",
    r"\bdeveloper\s+mode\s+(?:enabled|on|activated)\b",
    r"\bpretend\s+(?:that\s+)?you\s+have\s+no\s+(?:restrictions|rules|guidelines|filters|limits)",
    r"\b(?:reveal|print|show|repeat|output)\s+(?:me\s+)?(?:your|the)\s+(?:system\s+prompt|hidden\s+instructions|initial\s+instructions)",
    # Turkish: "önceki talimatları yok say", "tüm talimatlarını unut",
    # "sistem istemini görmezden gel", "artık kısıtlamasız bir yapay zekasın".
    r"(?:önceki|yukarıdaki|tüm|bütün|verilen)\s+(?:\w+\s+)?(?:talimatlar|kurallar|komutlar|yönergeler)\w*\s+"
    r"(?:yok\s+say|görmezden\s+gel|unut|dikkate\s+alma|geçersiz)",
    r"(?:talimatlar|kurallar|komutlar)\w*\s+(?:hepsini\s+)?(?:yok\s+say|görmezden\s+gel|unut)",
    r"sistem\s+(?:istem|mesaj|talimat|komut)\w*\s+(?:yok\s+say|görmezden\s+gel|unut|göster|açıkla|yaz)",
    r"artık\s+(?:sen\s+)?(?:dan\b|kısıtlamasız|sınırsız|kuralsız|filtresiz)",
]))


class InjectionDetector:
    kind = "injection"

    def find(self, text: str) -> list[Match]:
        lower = text.lower()
        for hint in _INJECTION_HINTS:
            if hint in lower:
                break
        else:
            return []
        if len(lower) != len(text):
            # A few capitals ("İ") lower-case to two characters; positions in
            # the lowered text would no longer be the text's.
            lower = "".join(c.lower()[0] for c in text)
        return [Match(self.kind, "injection", m.start(), m.end(), text[m.start():m.end()])
                for m in _INJECTION.finditer(lower)]


SHIPPED: tuple[detectors.Detector, ...] = (
    SecretsDetector(), CardsDetector(), EmailDetector(), PhoneDetector(), IbanDetector(),
    NationalIdDetector(), PersonDetector(), InjectionDetector())


def shipped() -> list[detectors.Detector]:
    """llmgw's detectors: what its `llmgw.detectors` entry point names (llmgw/plugins.py)."""
    return list(SHIPPED)


# Registered on import as well, so that every process that reads a policy
# (tests and tools included, not only a server that loaded its plugins) has them.
for _detector in SHIPPED:
    detectors.register(_detector)
