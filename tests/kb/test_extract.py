"""A document's text: text and HTML read, any other kind refused by name."""

from __future__ import annotations

import pytest

from llmgw.kb import Unreadable, text_of


def test_markdown_is_read_as_it_is_and_a_byte_order_mark_is_dropped():
    assert text_of("Guide.MD", "\ufeff# Title\n\nBody".encode()) == "# Title\n\nBody"


def test_html_keeps_its_words_and_paragraphs_and_leaves_out_scripts_styles_and_tags():
    page = (b"<html><head><title>t</title><style>p{color:red}</style></head><body><h1>Ports</h1>"
            b"<p>The admin API &amp; its <b>port</b>: 9090.</p><script>alert('x')</script><p>Next</p></body></html>")
    assert text_of("ports.html", page) == "Ports\n\nThe admin API & its port: 9090.\n\nNext"


def test_another_kind_or_bytes_that_are_not_text_are_refused_saying_what_is_read():
    with pytest.raises(Unreadable) as pdf:
        text_of("scan.pdf", b"%PDF-1.7")
    assert pdf.value.code == "unsupported_file" and ".md" in str(pdf.value) and "scan.pdf" in str(pdf.value)
    with pytest.raises(Unreadable) as latin:
        text_of("notes.txt", "café".encode("latin-1"))
    assert latin.value.code == "invalid_file" and "UTF-8" in str(latin.value)
    with pytest.raises(Unreadable):
        text_of("dump.txt", b"abc\x00def")
