"""The manual's Markdown as HTML, for /install and /docs: the part of Markdown docs/ is written in, and safe.

Headings (with the ids GitHub gives them, so a page's #anchors work), paragraphs, fenced code, lists
(nested by indentation), tables, block quotes, images, links, code spans, bold and italics. Everything
else is text. Every piece of text is escaped before a tag is put around it, and a link goes only to
http(s), mailto, a fragment or another page of the manual (`ha.md#x` becomes `/docs/ha#x`, `img/a.png`
`/docs/img/a.png`): a page can hold no markup, script or URL of its own. Written here rather than taken
from PyPI: the manual is ours, and what it uses is this much.
"""

from __future__ import annotations

import re

from markupsafe import Markup, escape

_FENCE = re.compile(r"^```")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^(\s*)([-*]|\d+\.)\s+(.*)$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_CODE = re.compile(r"`([^`]+)`")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_ITALIC = re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])")
_PAGE_LINK = re.compile(r"^([a-z0-9][a-z0-9-]*)\.md(#[\w-]*)?$")


def slug(text: str) -> str:
    """A heading's id as GitHub makes it: lower case, punctuation gone, spaces as hyphens."""
    plain = re.sub(r"[`*_\[\]()]", "", text).strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", plain))


def target(url: str, base: str) -> str | None:
    """Where a link of the manual goes on this site; None for one that is not let through."""
    if url.startswith(("https://", "http://", "mailto:", "#")):
        return url
    page = _PAGE_LINK.match(url)
    if page:
        return f"{base}/{page.group(1)}{page.group(2) or ''}"
    if re.fullmatch(r"img/[\w.-]+\.(png|jpg|jpeg|svg|gif)", url):
        return f"{base}/{url}"
    return None


def inline(text: str, base: str = "/docs") -> Markup:
    """One line's inline Markdown: code spans kept as they are, the rest escaped, then marked up."""
    out: list[str] = []
    last = 0
    for code in _CODE.finditer(text):
        out.append(_marked(text[last:code.start()], base))
        out.append(f"<code>{escape(code.group(1))}</code>")
        last = code.end()
    out.append(_marked(text[last:], base))
    return Markup("".join(out))  # noqa: S704 - every piece of text in it was escaped above


def _marked(text: str, base: str) -> str:
    parts: list[str] = []
    last = 0
    for found in re.finditer(f"{_IMAGE.pattern}|{_LINK.pattern}", text):
        parts.append(_emphasis(str(escape(text[last:found.start()]))))
        if found.group(0).startswith("!"):
            alt, url = found.group(1), found.group(2)
            where = target(url, base)
            parts.append(f'<img src="{escape(where)}" alt="{escape(alt)}">' if where else str(escape(alt)))
        else:
            label, url = found.group(3), found.group(4)
            where = target(url, base)
            shown = _emphasis(str(escape(label)))
            parts.append(f'<a href="{escape(where)}">{shown}</a>' if where else shown)
        last = found.end()
    parts.append(_emphasis(str(escape(text[last:]))))
    return "".join(parts)


def _emphasis(escaped: str) -> str:
    return _ITALIC.sub(r"<em>\1</em>", _BOLD.sub(r"<strong>\1</strong>", escaped))


def render(text: str, base: str = "/docs") -> Markup:
    """The page as HTML."""
    return Markup("\n".join(_blocks(text.splitlines(), base)))  # noqa: S704 - _blocks escapes every text


def _blocks(lines: list[str], base: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif _FENCE.match(line.strip()):
            end = next((j for j in range(i + 1, len(lines)) if _FENCE.match(lines[j].strip())), len(lines))
            out.append(f"<pre><code>{escape(chr(10).join(lines[i + 1:end]))}</code></pre>")
            i = end + 1
        elif heading := _HEADING.match(line):
            level, title = len(heading.group(1)), heading.group(2)
            out.append(f'<h{level} id="{escape(slug(title))}">{inline(title, base)}</h{level}>')
            i += 1
        elif line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]):
            end = i + 2
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            out.append(_table(lines[i], lines[i + 2:end], base))
            i = end
        elif line.startswith(">"):
            end = i
            while end < len(lines) and lines[end].startswith(">"):
                end += 1
            quoted = [q[1:].removeprefix(" ") for q in lines[i:end]]
            out.append("<blockquote>" + "\n".join(_blocks(quoted, base)) + "</blockquote>")
            i = end
        elif _ITEM.match(line):
            i = _list(lines, i, out, base)
        else:
            end = i
            while end < len(lines) and lines[end].strip() and not _starts_block(lines, end):
                end += 1
            end = max(end, i + 1)
            out.append("<p>" + " ".join(str(inline(p.strip(), base)) for p in lines[i:end]) + "</p>")
            i = end
    return out


def _starts_block(lines: list[str], i: int) -> bool:
    line = lines[i]
    return bool(_FENCE.match(line.strip()) or _HEADING.match(line) or _ITEM.match(line) or line.startswith(">")
                or (line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1])))


def _list(lines: list[str], i: int, out: list[str], base: str) -> int:
    first = _ITEM.match(lines[i])
    assert first is not None  # _blocks comes here only at an item
    indent = len(first.group(1))
    tag = "ol" if first.group(2)[0].isdigit() else "ul"
    items: list[list[str]] = []
    while i < len(lines):
        item = _ITEM.match(lines[i])
        if item and len(item.group(1)) == indent:
            items.append([item.group(3)])
            i += 1
            continue
        line = lines[i]
        ahead = next((lines[j] for j in range(i, len(lines)) if lines[j].strip()), "")
        if not line.strip() and len(ahead) - len(ahead.lstrip()) > indent:
            items[-1].append("")
            i += 1
            continue
        if line.strip() and len(line) - len(line.lstrip()) > indent:
            items[-1].append(line[min(len(line) - len(line.lstrip()), indent + 2):])
            i += 1
            continue
        break
    parts = []
    for item_lines in items:
        inner = _blocks(item_lines, base)
        if len(inner) == 1 and inner[0].startswith("<p>"):
            inner = [inner[0][3:-4]]  # a one-paragraph item is its text
        elif inner and inner[0].startswith("<p>"):
            inner[0] = inner[0][3:-4]
        parts.append("<li>" + "\n".join(inner) + "</li>")
    out.append(f"<{tag}>" + "\n".join(parts) + f"</{tag}>")
    return i


def _cells(row: str) -> list[str]:
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    cells, current, in_code = [], "", False
    for n, ch in enumerate(row):
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code and (n == 0 or row[n - 1] != "\\"):
            cells.append(current)
            current = ""
            continue
        current += ch
    cells.append(current)
    return [c.strip().replace("\\|", "|") for c in cells]


def _table(head: str, rows: list[str], base: str) -> str:
    header = "".join(f"<th>{inline(c, base)}</th>" for c in _cells(head))
    body = "".join("<tr>" + "".join(f"<td>{inline(c, base)}</td>" for c in _cells(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"
