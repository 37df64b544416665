"""The client API: /v1 in OpenAI's and Anthropic's shapes, and the health endpoints."""
