"""llmgw: a company's own machines as one private, OpenAI-compatible LLM service."""

__version__ = "0.1.0"
