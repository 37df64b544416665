"""National identity numbers: Türkiye's and the EU's common formats, each checked by its own algorithm.

Most of these are plain runs of digits, and plain runs of digits are
everywhere (order numbers, phone numbers, amounts), so each candidate must
pass its format's check digits before it counts:

| format | shape | check | a random number of that shape passes |
|---|---|---|---|
| TR T.C. Kimlik No | 11 digits, not starting 0 | two check digits | about 1 in 100 |
| ES DNI / NIE | 8 digits + letter / X,Y,Z + 7 digits + letter | letter mod 23 | 1 in 23 |
| IT codice fiscale | 16 letters and digits in a fixed pattern | check letter | 1 in 26, and the shape is rare |
| FR NIR | 13 digits (2A/2B for Corsica) + a 2-digit key | 97 − n mod 97 | about 1 in 97 |
| PL PESEL | 11 digits, a birth date inside | weighted mod 10, plus the date | about 1 in 50 |
| DE Steuer-ID | 11 digits, not starting 0 | ISO 7064 mod 11,10, plus a digit-repeat rule | about 1 in 30 |
| NL BSN | 9 digits | the 11-proof | 1 in 11 |

A DE Steuer-ID or an NL BSN is only taken with its name close before it
("Steuer-ID", "IdNr", "BSN", "burgerservicenummer"): their checks are too
weak on their own — one 9-digit number in eleven passes the 11-proof.
"""

from __future__ import annotations

import re

from llmgw.guard.detectors import Match

_ANY_DIGIT = re.compile(r"\d")
# Each pattern starts with a character class and checks what is before it
# after: Python's re then skips to candidates in C, where a look-behind in
# front made it try every position of the text (measured 6x slower).
# The formats that start with a digit, in one pattern: one attempt per digit
# of the text rather than one per format (national ids were half of the
# cost of every PII rule together before).
_NUMBER = re.compile(
    r"\d(?<!\w\d)(?:"
    r"(?P<dni>\d{7}[ -]?[A-Z])"                                            # ES DNI
    r"|(?P<run>\d{8,10})"                                                  # TC, PESEL, Steuer-ID (11), BSN (9)
    r"|(?P<nir> ?\d{2} ?\d{2} ?(?:\d{2}|2[AB]) ?\d{3} ?\d{3} ?\d{2})"   # FR NIR
    r")(?!\w)")
_NIE = re.compile(r"([XYZ])(?<!\w[XYZ])[ -]?(\d{7})[ -]?([A-Z])(?!\w)")
_CF = re.compile(r"[A-Z](?<!\w[A-Z])[A-Z]{5}[0-9LMNPQRSTUV]{2}[ABCDEHLMPRST]"
                 r"[0-9LMNPQRSTUV]{2}[A-Z][0-9LMNPQRSTUV]{3}[A-Z](?!\w)")
_DE_CUE = re.compile(r"steuer|identifikationsnummer|\bidnr|\btin\b", re.IGNORECASE)
_NL_CUE = re.compile(r"\bbsn\b|burgerservicenummer|sofi", re.IGNORECASE)
# How far before a number its name may be: "Steuer-ID: 65929970489" and
# "my BSN is 111222333" both fit.
CUE_WINDOW = 40

_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"
_CF_ODD = dict(zip("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                   [1, 0, 5, 7, 9, 13, 15, 17, 19, 21] +
                   [1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 2, 4, 18, 20, 11, 3, 6, 8, 12, 14, 16, 10, 22, 25, 24, 23],
                   strict=True))
_CF_EVEN = {**{str(d): d for d in range(10)}, **{chr(65 + i): i for i in range(26)}}


def tc_kimlik_ok(number: str) -> bool:
    d = [int(c) for c in number]
    if len(d) != 11 or d[0] == 0:
        return False
    tenth = ((d[0] + d[2] + d[4] + d[6] + d[8]) * 7 - (d[1] + d[3] + d[5] + d[7])) % 10
    return tenth == d[9] and sum(d[:10]) % 10 == d[10]


def steuer_id_ok(number: str) -> bool:
    if len(number) != 11 or number[0] == "0":
        return False
    counts = [number[:10].count(c) for c in set(number[:10])]
    # Since 2016: in the first ten digits exactly one digit is there two or
    # three times, and every other at most once.
    if sorted(c for c in counts if c > 1) not in ([2], [3]):
        return False
    product = 10
    for c in number[:10]:
        total = (int(c) + product) % 10 or 10
        product = (total * 2) % 11
    check = (11 - product) % 10
    return check == int(number[10])


def bsn_ok(number: str) -> bool:
    if len(number) != 9 or number == "000000000":
        return False
    total = sum(int(c) * (9 - i) for i, c in enumerate(number[:8])) - int(number[8])
    return total % 11 == 0


def pesel_ok(number: str) -> bool:
    if len(number) != 11:
        return False
    d = [int(c) for c in number]
    weights = (1, 3, 7, 9, 1, 3, 7, 9, 1, 3)
    if (10 - sum(w * x for w, x in zip(weights, d[:10], strict=True)) % 10) % 10 != d[10]:
        return False
    month, day = int(number[2:4]) % 20, int(number[4:6])
    return 1 <= month <= 12 and 1 <= day <= 31


def dni_ok(digits: str, letter: str) -> bool:
    return _DNI_LETTERS[int(digits) % 23] == letter


def codice_fiscale_ok(code: str) -> bool:
    total = sum((_CF_ODD if i % 2 == 0 else _CF_EVEN)[c] for i, c in enumerate(code[:15]))
    return chr(65 + total % 26) == code[15]


def nir_ok(text: str) -> bool:
    compact = text.replace(" ", "")
    body = compact[:13].replace("2A", "19").replace("2B", "18")
    if len(compact) != 15 or not body.isdigit():
        return False
    return 97 - int(body) % 97 == int(compact[13:])


class NationalIdDetector:
    kind = "national_id"
    rule = "pii:national_id"

    def pending(self, text: str) -> int:
        """A run of digits and capitals (with spaces, dots or dashes) ending `text` may be an id going on:
        a TC number, a NIR written with spaces, a codice fiscale, a NIE."""
        start = len(text)
        while start > 0 and (text[start - 1] in "0123456789 .-" or "A" <= text[start - 1] <= "Z"):
            start -= 1
        while start < len(text) and text[start] in " .-":
            start += 1
        return start

    def find(self, text: str) -> list[Match]:
        if not _ANY_DIGIT.search(text):
            return []
        found: list[Match] = []
        taken: set[int] = set()

        def add(m: re.Match[str]) -> None:
            if m.start() not in taken:
                taken.add(m.start())
                found.append(Match(self.kind, self.rule, m.start(), m.end(), m.group()))

        for m in _NUMBER.finditer(text):
            number = m.group()
            if m.group("run"):
                if len(number) == 11:
                    if tc_kimlik_ok(number) or pesel_ok(number) or (
                            steuer_id_ok(number) and _DE_CUE.search(text, max(0, m.start() - CUE_WINDOW), m.start())):
                        add(m)
                elif len(number) == 9 and bsn_ok(number) and _NL_CUE.search(text, max(0, m.start() - CUE_WINDOW),
                                                                            m.start()):
                    add(m)
            elif m.group("dni"):
                if dni_ok(number[:8], number[-1]):
                    add(m)
            elif number[0] in "1278" and nir_ok(number):
                add(m)
        for m in _NIE.finditer(text):
            if dni_ok(str("XYZ".index(m.group(1))) + m.group(2), m.group(3)):
                add(m)
        for m in _CF.finditer(text):
            if codice_fiscale_ok(m.group()):
                add(m)
        return found
