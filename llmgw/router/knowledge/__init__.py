"""Knowledge bases in OpenAI's shapes (docs/knowledge.md): the client API (api.py), a file's import
(ingest.py), and texts embedded through the gateway as the key that asked (embed.py)."""

from llmgw.router.knowledge.api import add_routes

__all__ = ["add_routes"]
