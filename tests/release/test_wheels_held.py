"""A node's engine wheels in DATA/wheels: checked once, not hashed again at every llama.cpp install."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from llmgw.release import ReleaseError, fetch_wheels

# Nothing listens here: a wheel the node would fetch again fails, one it keeps does not ask.
NOBODY = "127.0.0.1:9"


def _wheel(folder, name="xllamacpp-0.1-py3-none-any.whl", body=b"wheel bytes"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(body)
    return path, {name: hashlib.sha256(body).hexdigest()}


def test_a_wheel_already_held_and_checked_is_kept_without_asking_the_control_plane(tmp_path):
    path, listed = _wheel(tmp_path / "wheels")
    assert asyncio.run(fetch_wheels(NOBODY, listed, None, tmp_path / "wheels")) == [path]
    mark = path.with_name(path.name + ".sha256")
    assert mark.read_text().split()[0] == listed[path.name]
    assert asyncio.run(fetch_wheels(NOBODY, listed, None, tmp_path / "wheels")) == [path]


def test_a_held_wheel_that_changed_since_its_check_is_checked_again_and_fetched_when_wrong(tmp_path):
    path, listed = _wheel(tmp_path / "wheels")
    asyncio.run(fetch_wheels(NOBODY, listed, None, tmp_path / "wheels"))
    path.write_bytes(b"another wheel, longer")  # its mark no longer fits: hashed, found wrong, fetched
    with pytest.raises(ReleaseError):
        asyncio.run(fetch_wheels(NOBODY, listed, None, tmp_path / "wheels"))
