"""Reading an engine's Server-Sent Events: where an event ends, and what its payload is."""

from __future__ import annotations

from llmgw.router import sse

STREAM = (b'data: {"id":"c1","choices":[{"delta":{"content":"Hel"}}]}\n\n'
          b'data: {"id":"c1","choices":[{"delta":{"content":"lo"}}]}\n\n'
          b"data: [DONE]\n\n")


def split_every(data: bytes, size: int) -> list[bytes]:
    splitter = sse.Splitter()
    ready = [splitter.feed(data[i:i + size]) for i in range(0, len(data), size)]
    return [block for block in ready + [splitter.rest()] if block]


def test_an_event_cut_by_the_socket_anywhere_is_handed_on_only_once_it_is_whole():
    for size in range(1, len(STREAM) + 1):
        blocks = split_every(STREAM, size)
        assert b"".join(blocks) == STREAM, size
        # Every block handed on ends at an event's end: nobody sees half an event.
        assert all(block.endswith(b"\n\n") for block in blocks), size
        assert [p for block in blocks for p in sse.payloads(block)] == list(sse.payloads(STREAM))


def test_a_blank_line_cut_between_two_reads_still_ends_the_event():
    splitter = sse.Splitter()
    assert splitter.feed(b'data: {"a":1}\n') == b""
    assert splitter.feed(b'\ndata: {"b"') == b'data: {"a":1}\n\n'
    assert splitter.feed(b":2}\r\n\r\n") == b'data: {"b":2}\r\n\r\n'


def test_a_server_that_writes_crlf_is_read_as_one_that_writes_lf():
    crlf = STREAM.replace(b"\n", b"\r\n")
    assert list(sse.payloads(crlf)) == list(sse.payloads(STREAM))
    assert split_every(crlf, 7) and all(b.endswith(b"\r\n\r\n") for b in split_every(crlf, 7))


def test_a_comment_is_a_keep_alive_with_no_payload():
    block = b": the model is loading\n\n" + STREAM
    assert sse.events(block)[0] == b": the model is loading"
    assert sse.data(b": the model is loading") is None
    assert len(list(sse.payloads(block))) == 3


def test_several_data_lines_of_one_event_are_one_payload_joined_by_newlines():
    event = b'data: {"text":\ndata: "two lines"}'
    assert sse.data(event) == b'{"text":\n"two lines"}'


def test_an_event_named_before_its_data_gives_its_data():
    named = b'event: message_start\ndata: {"type":"message_start"}\n\n'
    assert list(sse.payloads(named)) == [b'{"type":"message_start"}']


def test_done_is_a_payload_like_any_other_and_the_space_after_the_colon_is_optional():
    assert list(sse.payloads(b"data:[DONE]\n\ndata: [DONE] \n\n")) == [sse.DONE, sse.DONE]
    assert sse.data(b'data:{"a":1}') == b'{"a":1}'


def test_what_is_left_without_a_blank_line_at_the_end_is_still_an_event():
    splitter = sse.Splitter()
    assert splitter.feed(b'data: {"a":1}\n\ndata: {"b":2}') == b'data: {"a":1}\n\n'
    assert splitter.rest() == b'data: {"b":2}\n\n'
    assert splitter.rest() == b""
    splitter.feed(b"\n")
    assert splitter.rest() == b""  # only a line end was left: no event
