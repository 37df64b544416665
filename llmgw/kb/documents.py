"""A document's text by page: on a person's machine (`llmgw-kb`), or the gateway's for a file uploaded whole.

PDF (each page its text, by pypdf), Word (.docx: its paragraphs and
tables), PowerPoint (.pptx: each slide a page), Excel (.xlsx: each sheet a
page, a row a line, its cells by tabs), and every kind extract.py reads
(text and HTML, one page). The Office formats are zip files of XML, read
here with the standard library: the text is all that is wanted of them.

A page is numbered from 1 (a slide, a sheet), or None for a document
without pages; a passage the gateway refuses is named by its file and page.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import PurePosixPath
from xml.etree import ElementTree

from llmgw.kb.extract import HTML_SUFFIXES, TEXT_SUFFIXES, Unreadable, text_of

OFFICE_SUFFIXES = frozenset((".docx", ".pptx", ".xlsx"))
READ_SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | OFFICE_SUFFIXES | {".pdf"}
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_SLIDE = re.compile(r"^ppt/slides/slide(\d+)\.xml$")
_SHEET = re.compile(r"^xl/worksheets/sheet(\d+)\.xml$")
# An Office file is a zip: a small one may unpack to far more. Past this, its XML is not read.
MOST_XML_BYTES = 200 * 1024 * 1024

Page = tuple[int | None, str]


def reads(name: str) -> bool:
    """Whether a file of this name is a kind read here."""
    return PurePosixPath(name.lower()).suffix in READ_SUFFIXES


def pages_of(name: str, content: bytes) -> list[Page]:
    """The document's text, a (page, text) pair a page; Unreadable when it cannot be read."""
    suffix = PurePosixPath(name.lower()).suffix
    if suffix not in READ_SUFFIXES:
        raise Unreadable(f"{name}: a knowledge base reads PDF, Word, PowerPoint, Excel, HTML and text "
                         f"({', '.join(sorted(READ_SUFFIXES))}); turn a {suffix or 'suffixless'} file into one of "
                         "those first")
    if suffix == ".pdf":
        return _pdf(name, content)
    if suffix in OFFICE_SUFFIXES:
        try:
            with zipfile.ZipFile(BytesIO(content)) as office:
                if sum(i.file_size for i in office.infolist() if i.filename.endswith(".xml")) > MOST_XML_BYTES:
                    raise Unreadable(f"{name}: unpacks to more than {MOST_XML_BYTES // 2 ** 20} MB of XML",
                                     "file_too_large")
                reader = {".docx": _docx, ".pptx": _pptx, ".xlsx": _xlsx}[suffix]
                return reader(office)
        except (zipfile.BadZipFile, ElementTree.ParseError, KeyError) as e:
            raise Unreadable(f"{name}: not a {suffix} file that can be read ({e})", "invalid_file") from None
    return [(None, text_of(name, content))]


def _pdf(name: str, content: bytes) -> list[Page]:
    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError:
        raise Unreadable(f"{name}: reading PDF needs the pypdf package (pip install pypdf==6.19.0)",
                         "unsupported_file") from None
    try:
        reader = PdfReader(BytesIO(content))
        if reader.is_encrypted:
            raise Unreadable(f"{name}: the PDF is encrypted; save a copy without a password", "invalid_file")
        pages: list[Page] = [(n, page.extract_text() or "") for n, page in enumerate(reader.pages, 1)]
    except PdfReadError as e:
        raise Unreadable(f"{name}: not a PDF that can be read ({e})", "invalid_file") from None
    if not any(text.strip() for _, text in pages):
        raise Unreadable(f"{name}: its pages hold no text (a scan without OCR?)", "empty_file")
    return pages


def _xml(office: zipfile.ZipFile, member: str) -> ElementTree.Element:
    # On a person's machine (llmgw-kb) or the gateway (a file uploaded as it is): expat refuses entity expansion
    # past its amplification limit (billion laughs), and the XML's unpacked size is bounded above.
    return ElementTree.fromstring(office.read(member))  # noqa: S314


def _docx(office: zipfile.ZipFile) -> list[Page]:
    body = _xml(office, "word/document.xml")
    paragraphs = ["".join(t.text or "" for t in p.iter(f"{_W}t")) for p in body.iter(f"{_W}p")]
    return [(None, "\n\n".join(p for p in paragraphs if p.strip()))]


def _numbered(office: zipfile.ZipFile, pattern: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    found = [(int(m.group(1)), m.group(0)) for m in map(pattern.match, office.namelist()) if m]
    yield from sorted(found)


def _pptx(office: zipfile.ZipFile) -> list[Page]:
    pages: list[Page] = []
    for number, member in _numbered(office, _SLIDE):
        slide = _xml(office, member)
        lines = ["".join(t.text or "" for t in p.iter(f"{_A}t")) for p in slide.iter(f"{_A}p")]
        pages.append((number, "\n".join(line for line in lines if line.strip())))
    return pages


def _xlsx(office: zipfile.ZipFile) -> list[Page]:
    shared: list[str] = []
    if "xl/sharedStrings.xml" in office.namelist():
        shared = ["".join(t.text or "" for t in si.iter(f"{_S}t"))
                  for si in _xml(office, "xl/sharedStrings.xml").iter(f"{_S}si")]
    pages: list[Page] = []
    for number, member in _numbered(office, _SHEET):
        rows = []
        for row in _xml(office, member).iter(f"{_S}row"):
            cells = []
            for cell in row.iter(f"{_S}c"):
                value = cell.find(f"{_S}v")
                inline = cell.find(f"{_S}is")
                if inline is not None:
                    cells.append("".join(t.text or "" for t in inline.iter(f"{_S}t")))
                elif value is not None and value.text is not None:
                    shared_index = int(value.text) if cell.get("t") == "s" and value.text.isdigit() else None
                    cells.append(shared[shared_index] if shared_index is not None and shared_index < len(shared)
                                 else value.text)
            if any(c.strip() for c in cells):
                rows.append("\t".join(cells))
        pages.append((number, "\n".join(rows)))
    return pages
