"""Where knowledge bases live and what embeds them, in one line: `server init` and the setup screens say it."""

from __future__ import annotations

from llmgw.config import redact_url


def where_line(store: str, embedding_model: str) -> str:
    place = (f"the SQLite store ({store[len('sqlite:'):]})" if store.startswith("sqlite:")
             else f"the PostgreSQL store ({redact_url(store)}), searched in each control plane's memory")
    model = (f"embedded by {embedding_model}" if embedding_model
             else "each names the model that embeds it (router.knowledge.embedding_model sets one for all)")
    return f"in {place}; {model}; filled with llmgw-kb sync (docs/knowledge.md)"
