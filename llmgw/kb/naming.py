"""The ids of knowledge bases and their file batches: as OpenAI writes them, and not to be guessed."""

from __future__ import annotations

import secrets

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _token() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(24))  # 142 bits


def new_vector_store_id() -> str:
    return "vs_" + _token()


def new_batch_id() -> str:
    return "vsfb_" + _token()
