"""The text of a document, from its bytes and its name: what a knowledge base cuts into passages.

Read here: text in UTF-8 (Markdown, reStructuredText, CSV, JSON, logs,
source code) and HTML, whose scripts, styles and markup are left out. A
document of another kind is refused by name, saying which kinds are read,
never guessed at: bytes read as the wrong kind would be embedded as noise
and answered from.
"""

from __future__ import annotations

import html.parser
import re
from pathlib import PurePosixPath

TEXT_SUFFIXES = frozenset((".txt", ".text", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl", ".log",
                           ".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".xml", ".py", ".go", ".js", ".ts",
                           ".java", ".c", ".h", ".cpp", ".rs", ".sh", ".sql", ".tex"))
HTML_SUFFIXES = frozenset((".html", ".htm", ".xhtml"))
_SKIPPED_TAGS = frozenset(("script", "style", "noscript", "template", "svg", "head"))
_BLOCK_TAGS = frozenset(("p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
                         "pre", "blockquote", "table", "ul", "ol", "dd", "dt", "hr"))


class Unreadable(Exception):
    """A document whose text cannot be read, in a sentence naming it (code: OpenAI's last_error code)."""

    def __init__(self, message: str, code: str = "unsupported_file"):
        super().__init__(message)
        self.code = code


def readable_kinds() -> str:
    return ", ".join(sorted(TEXT_SUFFIXES | HTML_SUFFIXES))


def text_of(filename: str, content: bytes) -> str:
    """The document's text; Unreadable when its kind is not read here or its bytes are not that kind."""
    suffix = PurePosixPath(filename.lower()).suffix
    if suffix not in TEXT_SUFFIXES and suffix not in HTML_SUFFIXES:
        raise Unreadable(f"{filename}: a knowledge base reads text and HTML files ({readable_kinds()}); "
                         f"turn a {suffix or 'suffixless'} file into one of those first")
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise Unreadable(f"{filename}: not UTF-8 text (byte {e.start} cannot be read); save it as UTF-8",
                         "invalid_file") from None
    if "\x00" in text:
        raise Unreadable(f"{filename}: holds NUL bytes, so it is not text", "invalid_file")
    return _html_text(text) if suffix in HTML_SUFFIXES else text


class _HtmlText(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED_TAGS:
            self._skipping += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_TAGS:
            self._skipping = max(0, self._skipping - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def _html_text(markup: str) -> str:
    parser = _HtmlText()
    parser.feed(markup)
    parser.close()
    text = "".join(parser.parts)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    return re.sub(r"\n\s*\n\s*", "\n\n", text).strip()
