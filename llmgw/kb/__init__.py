"""Knowledge bases (issue 29, docs/knowledge.md): documents read, cut into passages and searched.

The store keeps the passages and their vectors; this package reads a
document's text (extract; documents: PDF and Office too), cuts it
(passages), holds each control plane's vectors (vectors, near, index),
finds the passages for a question (retrieval, fusion), is the administrator's
service (admin: `ctl kb` and /admin/kb) and is `llmgw-kb` (tool). The
client API's routes are llmgw.router.knowledge.
"""

from llmgw.kb.admin import KnowledgeBases
from llmgw.kb.documents import pages_of
from llmgw.kb.extract import Unreadable, readable_kinds, text_of
from llmgw.kb.filters import Filter, FilterError, parse_filter
from llmgw.kb.fusion import fuse
from llmgw.kb.index import EXACT_BELOW, KbIndex
from llmgw.kb.naming import new_batch_id, new_vector_store_id
from llmgw.kb.passages import DEFAULT_OVERLAP, DEFAULT_TOKENS, Chunking, count_tokens, cut, given_passages
from llmgw.kb.retrieval import HYBRID, MODES, VECTOR, WORDS, Hit, Only, kept_by, search
from llmgw.kb.tool import Gateway, KbToolError, sync
from llmgw.kb.vectors import VectorsUnavailable, pack
from llmgw.kb.where import where_line

__all__ = ["DEFAULT_OVERLAP", "DEFAULT_TOKENS", "EXACT_BELOW", "HYBRID", "MODES", "VECTOR", "WORDS", "Chunking",
           "Filter", "FilterError", "Gateway", "Hit", "KbIndex", "KbToolError", "KnowledgeBases", "Only", "Unreadable",
           "VectorsUnavailable", "count_tokens", "cut", "fuse", "given_passages", "kept_by", "new_batch_id",
           "new_vector_store_id", "pack", "pages_of", "parse_filter", "readable_kinds", "search", "sync", "text_of",
           "where_line"]
