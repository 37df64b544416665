"""llmgw.media's PNG: what it writes is a PNG any decoder takes, checked here by decoding it by hand."""

from __future__ import annotations

import struct
import zlib

import pytest

from llmgw.media import encode_png, read_text, size, with_text

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def walk(png: bytes) -> list[tuple[bytes, bytes]]:
    """Every chunk's (type, data), each CRC checked with zlib.crc32: an independent reader of the file."""
    assert png[:8] == SIGNATURE
    at, found = 8, []
    while at < len(png):
        (length,) = struct.unpack(">I", png[at:at + 4])
        kind, data = png[at + 4:at + 8], png[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length:at + 12 + length])
        assert crc == zlib.crc32(kind + data), f"{kind!r} at {at} has a wrong CRC"
        found.append((kind, data))
        at += 12 + length
    assert found[-1] == (b"IEND", b"") and at == len(png)
    return found


def decode(png: bytes) -> tuple[int, int, bytes]:
    """(width, height, RGB bytes), from IHDR and the inflated IDAT, undoing filter type 0 only."""
    parts = walk(png)
    assert parts[0][0] == b"IHDR"
    w, h, depth, colour, comp, filt, interlace = struct.unpack(">IIBBBBB", parts[0][1])
    assert (depth, colour, comp, filt, interlace) == (8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(d for k, d in parts if k == b"IDAT"))
    stride = w * 3
    assert len(raw) == h * (stride + 1), "each row is its filter byte and width × 3 bytes"
    rows = [raw[y * (stride + 1):(y + 1) * (stride + 1)] for y in range(h)]
    assert all(r[0] == 0 for r in rows), "every row is written with filter type 0"
    return w, h, b"".join(r[1:] for r in rows)


def pattern(w: int, h: int) -> bytes:
    return bytes((x * 7 + y * 13 + c * 50) % 256 for y in range(h) for x in range(w) for c in range(3))


def test_a_picture_decodes_to_its_own_pixels_and_size():
    rgb = pattern(17, 5)
    png = encode_png(17, 5, rgb)
    assert decode(png) == (17, 5, rgb)
    assert size(png) == (17, 5)


def test_text_goes_in_as_utf8_itxt_before_the_pixels_and_reads_back():
    png = encode_png(2, 2, pattern(2, 2), text={"prompt": "un chat sur un toit, 猫", "Software": "llmgw"})
    kinds = [k for k, _ in walk(png)]
    assert kinds == [b"IHDR", b"iTXt", b"iTXt", b"IDAT", b"IEND"]
    assert read_text(png) == {"prompt": "un chat sur un toit, 猫", "Software": "llmgw"}
    first_itxt = walk(png)[1][1]
    assert first_itxt.startswith(b"prompt\x00\x00\x00\x00\x00"), "uncompressed, no language tag, no translated keyword"


def test_plain_text_is_written_as_text_where_latin1_holds_it_as_comfyui_writes_its_prompt():
    png = encode_png(1, 1, b"\x00\x00\x00", plain={"prompt": '{"3": {}}', "note": "élan 猫"})
    kinds = [k for k, _ in walk(png)]
    assert kinds == [b"IHDR", b"tEXt", b"iTXt", b"IDAT", b"IEND"]
    assert read_text(png) == {"prompt": '{"3": {}}', "note": "élan 猫"}


def test_text_added_to_an_existing_picture_lands_after_ihdr_and_keeps_its_pixels():
    rgb = pattern(4, 3)
    original = encode_png(4, 3, rgb, plain={"prompt": "{}"})
    png = with_text(original, {"llmgw": '{"model": "sdxl"}'})
    kinds = [k for k, _ in walk(png)]
    assert kinds == [b"IHDR", b"iTXt", b"tEXt", b"IDAT", b"IEND"]
    assert decode(png) == (4, 3, rgb)
    assert read_text(png) == {"prompt": "{}", "llmgw": '{"model": "sdxl"}'}


def test_a_compressed_ztxt_chunk_is_read_too():
    png = encode_png(1, 1, b"\x00\x00\x00")
    ztxt = b"Comment\x00\x00" + zlib.compress(b"made elsewhere")
    chunk = struct.pack(">I", len(ztxt)) + b"zTXt" + ztxt + struct.pack(">I", zlib.crc32(b"zTXt" + ztxt))
    at = 8 + 25  # after the signature and IHDR (13 bytes of data and 12 of length, type and CRC)
    assert read_text(png[:at] + chunk + png[at:]) == {"Comment": "made elsewhere"}


@pytest.mark.parametrize("data", [b"", b"GIF89a....", b"\x89PNG\r\n\x1a\nshort"])
def test_bytes_that_are_not_a_png_are_refused_with_a_sentence(data):
    with pytest.raises(ValueError, match="PNG"):
        with_text(data, {"a": "b"})


def test_a_damaged_chunk_is_refused_not_extended():
    png = bytearray(encode_png(3, 3, pattern(3, 3)))
    png[-20] ^= 0xFF  # inside IDAT
    with pytest.raises(ValueError, match="CRC"):
        with_text(bytes(png), {"a": "b"})


def test_pixels_of_the_wrong_length_and_bad_keywords_are_refused():
    with pytest.raises(ValueError, match="12 bytes"):
        encode_png(2, 2, b"\x00" * 11)
    with pytest.raises(ValueError, match="1 to 79"):
        encode_png(1, 1, b"\x00" * 3, text={"k" * 80: "x"})
    with pytest.raises(ValueError, match="spaces"):
        encode_png(1, 1, b"\x00" * 3, text={" lead": "x"})
    with pytest.raises(ValueError, match="Latin-1"):
        encode_png(1, 1, b"\x00" * 3, text={"猫": "x"})
