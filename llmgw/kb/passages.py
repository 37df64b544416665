"""A document's text cut into passages: what is embedded, searched and quoted back (docs/knowledge.md).

Cut at paragraph ends where it can, at sentence ends inside a long
paragraph, and at word ends inside a long sentence, so that a passage reads
as the author wrote it. Each passage holds up to `tokens` tokens and
repeats the last `overlap` tokens of the one before, so that an answer
which straddles a cut is whole in one of them.

Tokens are counted as words and marks (up to 16 letters, or one other character), the
same for every embedding model: a model's own tokenizer gives within a few
percent of that on prose, and the passages must not depend on which replica
cut them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from llmgw.kb.extract import Unreadable

# OpenAI's `auto` chunking, sized for the small embedding models a company serves: all-MiniLM-L6-v2 and
# bge-small read 256 and 512 of their tokens and truncate the rest, so a passage of OpenAI's 800 would be
# embedded by its first third.
DEFAULT_TOKENS = 200
DEFAULT_OVERLAP = 40
# OpenAI's bounds for a static strategy.
MIN_TOKENS, MAX_TOKENS = 100, 4096

# A run of letters longer than 16 counts as one token each 16, as a tokenizer cuts a long word or a pasted key
# into pieces: a 5,000-character blob is 313 tokens, not one.
_TOKEN = re.compile(r"\w{1,16}|[^\w\s]")
_PARAGRAPHS = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Chunking:
    tokens: int = DEFAULT_TOKENS
    overlap: int = DEFAULT_OVERLAP

    def problem(self) -> str | None:
        """What is wrong with these sizes, in OpenAI's terms, or None."""
        if not MIN_TOKENS <= self.tokens <= MAX_TOKENS:
            return f"max_chunk_size_tokens must be from {MIN_TOKENS} to {MAX_TOKENS}, got {self.tokens}"
        if not 0 <= self.overlap <= self.tokens // 2:
            return (f"chunk_overlap_tokens must be from 0 to half of max_chunk_size_tokens ({self.tokens // 2}), "
                    f"got {self.overlap}")
        return None


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def _pieces(text: str, most: int) -> list[str]:
    """The text as pieces of at most `most` tokens each: paragraphs, else sentences, else runs of words."""
    out: list[str] = []
    for paragraph in _PARAGRAPHS.split(text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if count_tokens(paragraph) <= most:
            out.append(paragraph)
            continue
        for sentence in _SENTENCE_END.split(paragraph):
            if count_tokens(sentence) <= most:
                out.append(sentence)
                continue
            words = sentence.split()
            run: list[str] = []
            size = 0
            for word in words:
                n = count_tokens(word)
                if run and size + n > most:
                    out.append(" ".join(run))
                    run, size = [], 0
                if n > most:  # one "word" longer than a passage: a pasted blob, cut at token ends
                    tokens = _TOKEN.findall(word)
                    out += ["".join(tokens[i:i + most]) for i in range(0, len(tokens), most)]
                    continue
                run.append(word)
                size += n
            if run:
                out.append(" ".join(run))
    return out


def _tail(text: str, tokens: int) -> str:
    """The last `tokens` tokens of text, from a word's start."""
    if tokens <= 0:
        return ""
    words = text.split()
    kept: list[str] = []
    size = 0
    for word in reversed(words):
        n = count_tokens(word)
        if size + n > tokens:
            break
        kept.append(word)
        size += n
    return " ".join(reversed(kept))


def cut(text: str, chunking: Chunking = Chunking()) -> list[str]:
    """The passages of a document's text, in order; none for a text with no words."""
    most = chunking.tokens
    passages: list[str] = []
    current: list[str] = []
    size = 0
    for piece in _pieces(text, most - chunking.overlap if chunking.overlap else most):
        n = count_tokens(piece)
        if current and size + n > most:
            passages.append("\n\n".join(current))
            carried = _tail(passages[-1], chunking.overlap)
            current = [carried] if carried else []
            size = count_tokens(carried)
        current.append(piece)
        size += n
    if current and any(count_tokens(p) for p in current):
        passages.append("\n\n".join(current))
    return passages


def given_passages(name: str, content: bytes) -> list[tuple[int | None, str]]:
    """The passages `llmgw-kb` cut on its own machine (a file named …{PASSAGES_SUFFIX}): one JSON object a
    line, {"text": …, "page": N or null}; Unreadable, naming the line, for one that is not."""
    found: list[tuple[int | None, str]] = []
    try:
        lines = content.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise Unreadable(f"{name}: not UTF-8", "invalid_file") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            item = None
        text = item.get("text") if isinstance(item, dict) else None
        page = item.get("page") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip() or not (page is None or (
                isinstance(page, int) and not isinstance(page, bool) and page >= 1)):
            raise Unreadable(f"{name}, line {number}: each line is an object with \"text\" (a string) and "
                             "\"page\" (a number from 1, or null)", "invalid_file")
        if count_tokens(text) > MAX_TOKENS:
            raise Unreadable(f"{name}, line {number}: a passage of more than {MAX_TOKENS} tokens; cut it smaller",
                             "invalid_file")
        found.append((page, text))
    return found
