"""Documents read where they are: PDF by page, Word, PowerPoint by slide, Excel by sheet; folders scanned."""

from __future__ import annotations

import pytest

from llmgw.kb import Unreadable
from llmgw.kb.documents import pages_of
from llmgw.kb.tool import matches, scan
from tests.support.documents import docx, pdf, pptx, xlsx


def test_a_pdf_is_read_page_by_page(tmp_path):
    made = pdf(tmp_path / "r.pdf", ["The admin API listens on port 9090.", "Usage rows are written in batches."])
    pages = pages_of("r.pdf", made.read_bytes())
    assert [n for n, _ in pages] == [1, 2]
    assert "9090" in pages[0][1] and "batches" in pages[1][1]


def test_word_powerpoint_and_excel_give_their_text(tmp_path):
    [(page, text)] = pages_of("a.docx", docx(tmp_path / "a.docx", ["First & foremost.", "Second."]).read_bytes())
    assert page is None and text == "First & foremost.\n\nSecond."
    slides = pages_of("s.pptx", pptx(tmp_path / "s.pptx", [["Title one", "a point"], ["Title two"]]).read_bytes())
    assert slides == [(1, "Title one\na point"), (2, "Title two")]
    sheets = pages_of("b.xlsx", xlsx(tmp_path / "b.xlsx", [[["part", "price"], ["X-100", "12"]]]).read_bytes())
    assert sheets == [(1, "part\tprice\nX-100\t12")]


def test_a_broken_or_empty_document_is_refused_by_name(tmp_path):
    with pytest.raises(Unreadable) as broken:
        pages_of("a.docx", b"not a zip")
    assert broken.value.code == "invalid_file" and "a.docx" in str(broken.value)
    with pytest.raises(Unreadable) as empty:
        pages_of("scan.pdf", pdf(tmp_path / "scan.pdf", [""]).read_bytes())
    assert empty.value.code == "empty_file" and "OCR" in str(empty.value)


def test_globs_match_a_name_anywhere_or_a_path_from_the_folder():
    assert matches("reports/2026/q1.pdf", "*.pdf")
    assert matches("reports/2026/q1.xlsx", "reports/**/*.xlsx")
    assert matches("reports/q1.xlsx", "reports/**/*.xlsx")
    assert not matches("other/q1.xlsx", "reports/**/*.xlsx")
    assert not matches("reports/2026/q1.pdf", "reports/*.pdf")


def test_a_scan_leaves_out_hidden_files_unread_kinds_and_what_is_excluded(tmp_path):
    (tmp_path / "docs" / ".git").mkdir(parents=True)
    (tmp_path / "docs" / ".git" / "notes.md").write_text("hidden folder")
    (tmp_path / "docs" / ".draft.md").write_text("hidden file")
    (tmp_path / "docs" / "guide.md").write_text("# Guide")
    (tmp_path / "docs" / "logo.png").write_bytes(b"\x89PNG")
    (tmp_path / "docs" / "old").mkdir()
    (tmp_path / "docs" / "old" / "v1.md").write_text("old")
    found = scan([tmp_path / "docs"], [], ["old/**"], hidden=False)
    assert [d.path for d in found] == ["guide.md"]
    everything = scan([tmp_path / "docs"], [], [], hidden=True)
    assert [d.path for d in everything] == [".draft.md", ".git/notes.md", "guide.md", "old/v1.md"]
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "a.txt").write_text("a")
    both = scan([tmp_path / "docs", tmp_path / "more"], ["*.md", "*.txt"], [], hidden=False)
    assert [d.path for d in both] == ["docs/guide.md", "docs/old/v1.md", "more/a.txt"]
