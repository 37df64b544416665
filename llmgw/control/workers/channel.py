"""The channel between the main process and one worker: messages.py's dataclasses, a line each, over a socketpair."""

from __future__ import annotations

import asyncio
import logging
import socket

from llmgw.control.workers.messages import Message, decode, encode
from llmgw.protocol import ProtocolError

log = logging.getLogger("llmgw.workers")

LINE_LIMIT = 64 * 1024 * 1024  # one message; a first minute of counts can be large
SEND_BUFFER_MAX = 64 * 1024 * 1024  # a worker that reads nothing (stopped, stuck) is not queued for forever


class WorkerFailed(Exception):
    """A worker could not start, as one sentence."""


class Channel:
    """Newline-separated JSON messages over one end of a socketpair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self._full_said = False

    @classmethod
    async def open(cls, sock: socket.socket) -> Channel:
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=LINE_LIMIT)
        return cls(reader, writer)

    def send(self, message: Message) -> None:
        if self.writer.is_closing():
            return
        if self.writer.transport.get_write_buffer_size() > SEND_BUFFER_MAX:
            if not self._full_said:
                log.warning("a worker's channel has %d MB unread; dropping messages to it until it reads",
                            SEND_BUFFER_MAX // (1024 * 1024))
                self._full_said = True
            return
        self._full_said = False
        self.writer.write(encode(message))

    async def receive(self) -> Message | None:
        """The next message, or None once the other end has closed."""
        while True:
            try:
                line = await self.reader.readline()
            except (ConnectionError, ValueError):  # ValueError: a line past LINE_LIMIT
                return None
            if not line:
                return None
            try:
                return decode(line)
            except ProtocolError as e:
                # Both ends are this program: a message that does not read is a bug of ours. Said,
                # and passed over, so one bad message does not stop a worker or its counts.
                log.error("a message between the main process and a worker could not be read (%s); "
                          "this is a bug in llmgw", e)

    async def close(self) -> None:
        self.writer.close()
        try:
            # Bounded: under uvloop, waiting on a socket whose peer was
            # SIGKILLed was seen to never return.
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)
        except (TimeoutError, ConnectionError, OSError):
            pass
