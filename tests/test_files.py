"""A file written with write_atomic is the old one or the new one, never half of either."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from llmgw.files import write_atomic


def test_a_file_is_replaced_whole_with_the_mode_asked_for(tmp_path):
    path = tmp_path / "agent-port.crt"
    path.write_bytes(b"old certificate\n")
    os.chmod(path, 0o600)
    old_umask = os.umask(0o077)
    try:
        write_atomic(path, b"new certificate\n", 0o644)
    finally:
        os.umask(old_umask)
    assert path.read_bytes() == b"new certificate\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not narrowed by the umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent-port.crt"]


def test_a_new_file_is_made_where_there_was_none(tmp_path):
    path = tmp_path / "record.json"
    write_atomic(str(path), b"{}")
    assert path.read_bytes() == b"{}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_write_that_fails_midway_leaves_the_old_file_whole_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "node.key"
    path.write_bytes(b"the old key, whole\n")
    real_write = os.write
    calls = []

    def disk_fills_after_the_first_bytes(fd, data):
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, bytes(data)[:4])

    monkeypatch.setattr(os, "write", disk_fills_after_the_first_bytes)
    with pytest.raises(OSError, match="No space left on device"):
        write_atomic(path, b"a new key that does not fit\n")
    monkeypatch.undo()
    assert len(calls) == 2  # it did write part of the new file before the disk filled
    assert path.read_bytes() == b"the old key, whole\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.key"]
