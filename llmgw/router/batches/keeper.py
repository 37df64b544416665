"""Where a file's bytes are kept: in the store when small, on the leader's data directory when not.

A file on disk is named by its id alone, under `<data_dir>/files/`, and an
id is checked against its one form before it names a path: a name a user
gave (the upload's filename) is only ever shown, so nothing a client sends
can reach outside that folder.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
from pathlib import Path

from llmgw.files import write_atomic
from llmgw.store import BatchStore, StoredFile
from llmgw.store.records_batch import IN_STORE, ON_DISK

_FILE_ID = re.compile(r"file-[0-9a-f]{24}")


def new_file_id() -> str:
    return "file-" + secrets.token_hex(12)


def is_file_id(text: str) -> bool:
    return bool(_FILE_ID.fullmatch(text))


class FileKeeper:
    def __init__(self, store: BatchStore, data_dir: str) -> None:
        self.store = store
        self.folder = Path(data_dir) / "files"

    def _path(self, file_id: str) -> Path:
        if not is_file_id(file_id):
            raise ValueError(f"{file_id!r} is not a file id")  # ids come from new_file_id(); a bug if not
        return self.folder / file_id

    async def keep(self, file: StoredFile, content: bytes) -> None:
        """Write the bytes where `file.place` says, then the row: a row never names bytes that are not there."""
        if file.place == ON_DISK:
            path = self._path(file.id)
            await asyncio.to_thread(self._write, path, content)
            try:
                await self.store.add_file(file, None)
            except BaseException:
                await asyncio.to_thread(path.unlink, True)
                raise
        else:
            await self.store.add_file(file, content)

    def _write(self, path: Path, content: bytes) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, content)

    async def read(self, file: StoredFile) -> bytes | None:
        """The file's bytes; None when they are gone (a disk file on a machine that no longer leads)."""
        if file.place == IN_STORE:
            return await self.store.file_content(file.id)
        path = self._path(file.id)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            return None

    async def delete(self, file: StoredFile) -> bool:
        deleted = await self.store.delete_file(file.id)
        if file.place == ON_DISK:
            try:
                await asyncio.to_thread(os.unlink, self._path(file.id))
            except FileNotFoundError:
                pass
        return deleted


def place_for(size: int, store_below: int) -> str:
    return IN_STORE if size < store_below else ON_DISK
