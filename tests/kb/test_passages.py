"""A document cut into passages: whole paragraphs where they fit, overlap carried, nothing lost."""

from __future__ import annotations

import pytest

from llmgw.kb import Chunking, count_tokens, cut


def _paragraph(n: int, words: int = 30) -> str:
    return " ".join(f"p{n}w{i}" for i in range(words)) + "."


def test_short_paragraphs_go_together_and_a_passage_never_passes_its_size():
    text = "\n\n".join(_paragraph(n) for n in range(20))
    passages = cut(text, Chunking(tokens=100, overlap=0))
    assert all(count_tokens(p) <= 100 for p in passages)
    assert passages[0].startswith("p0w0") and "p2w29" in passages[0]
    # Every word of the document is in some passage, in order.
    joined = " ".join(passages)
    assert [w for w in joined.replace(".", " ").split()] == [w for w in text.replace(".", " ").split()]


def test_each_passage_begins_with_the_end_of_the_one_before_when_asked_to_overlap():
    text = "\n\n".join(_paragraph(n) for n in range(10))
    passages = cut(text, Chunking(tokens=100, overlap=20))
    assert len(passages) > 2
    for before, after in zip(passages, passages[1:], strict=False):
        carried = after.split("\n\n")[0]
        assert before.endswith(carried) and 0 < count_tokens(carried) <= 20


def test_a_paragraph_longer_than_a_passage_is_cut_at_sentence_ends_then_at_words():
    sentences = " ".join(f"Sentence {n} says {' '.join(['word'] * 40)}." for n in range(5))
    blob = "x" * 5000
    passages = cut(sentences + "\n\n" + blob, Chunking(tokens=100, overlap=0))
    assert all(count_tokens(p) <= 100 for p in passages)
    assert passages[0].startswith("Sentence 0 says")
    assert "".join(p for p in passages if p.startswith("x")) == blob


def test_a_text_without_words_has_no_passages_and_sizes_out_of_bounds_are_named():
    assert cut(" \n\n \t ") == []
    assert "max_chunk_size_tokens must be from 100 to 4096, got 50" in Chunking(50, 0).problem()
    assert "chunk_overlap_tokens" in Chunking(200, 150).problem()
    assert Chunking(800, 400).problem() is None


def test_passages_cut_elsewhere_are_taken_as_they_are_and_a_bad_line_is_named():
    from llmgw.kb import Unreadable, given_passages

    good = b'{"text": "page one words", "page": 1}\n\n{"text": "no page", "page": null}\n'
    assert given_passages("r.pdf", good) == [(1, "page one words"), (None, "no page")]
    for bad in (b'{"text": ""}\n', b'{"text": "x", "page": 0}\n', b"not json\n", b'["text"]\n'):
        with pytest.raises(Unreadable) as refused:
            given_passages("r.pdf", b'{"text": "fine", "page": 1}\n' + bad)
        assert "r.pdf, line 2" in str(refused.value) and refused.value.code == "invalid_file"
    with pytest.raises(Unreadable) as long:
        given_passages("r.pdf", ('{"text": "' + "word " * 5000 + '"}\n').encode())
    assert "more than 4096 tokens" in str(long.value)
