"""A Hugging Face token, read from its file at each use, so a token changed on disk is used without a restart."""

from __future__ import annotations

from pathlib import Path


class TokenFileError(ValueError):
    """The token file could not be read; the message names it and the setting that points at it."""


def bearer(token_file: str, setting: str) -> dict[str, str]:
    """The Authorization header for the token in `token_file` (none when it is not set or is empty)."""
    if not token_file:
        return {}
    try:
        token = Path(token_file).read_text().strip()
    except OSError as e:
        raise TokenFileError(f"the Hugging Face token file {token_file} could not be read ({e.strerror}); put the "
                             f"token there, or take {setting} out for public models") from None
    return {"Authorization": f"Bearer {token}"} if token else {}
