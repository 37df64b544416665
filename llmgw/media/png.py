"""PNG files written and read with zlib and struct alone: truecolour pictures and their text chunks.

Pillow is not a dependency of llmgw, and what is needed here is small: the
ComfyUI stand-in writes real pictures, and the gateway writes what it knows
of a picture (its model, its request) into the PNG a real ComfyUI made. Text
goes before the first IDAT, where readers that stop at the pixels (and
ComfyUI's own frontend, which reads a dropped picture's workflow) find it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

SIGNATURE = b"\x89PNG\r\n\x1a\n"

# ComfyUI saves with compress_level=4: a picture a second or two of sampling
# made is not worth a slower level's few per cent.
_LEVEL = 4


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _keyword(keyword: str) -> bytes:
    """The keyword as the PNG specification allows it: 1 to 79 printable Latin-1 characters, single spaces inside."""
    if not 1 <= len(keyword) <= 79:
        raise ValueError(f"a PNG text keyword is 1 to 79 characters; {keyword[:20]!r}… has {len(keyword)}")
    if keyword != keyword.strip(" ") or "  " in keyword:
        raise ValueError(f"a PNG text keyword has no leading, trailing or double spaces: {keyword!r}")
    for ch in keyword:
        code = ord(ch)
        if not (32 <= code <= 126 or 161 <= code <= 255):
            raise ValueError(f"a PNG text keyword holds printable Latin-1 characters only; {keyword!r} has {ch!r}")
    return keyword.encode("latin-1")


def _itxt(keyword: str, text: str) -> bytes:
    # Uncompressed (flag 0, method 0), no language tag, no translated keyword.
    return _chunk(b"iTXt", _keyword(keyword) + b"\x00\x00\x00\x00\x00" + text.encode("utf-8"))


def _text_chunk(keyword: str, text: str) -> bytes:
    """tEXt where Latin-1 holds the text, as Pillow's add_text (and so ComfyUI's SaveImage) writes it; else iTXt."""
    try:
        data = text.encode("latin-1")
    except UnicodeEncodeError:
        return _itxt(keyword, text)
    if b"\x00" in data:
        return _itxt(keyword, text)
    return _chunk(b"tEXt", _keyword(keyword) + b"\x00" + data)


def encode_png(width: int, height: int, rgb: bytes, *, text: dict[str, str] | None = None,
               plain: dict[str, str] | None = None) -> bytes:
    """A truecolour 8-bit PNG of `rgb` (width × height × 3 bytes, rows top to bottom).

    `text` is written as iTXt chunks (UTF-8, uncompressed); `plain` as tEXt
    where Latin-1 holds the text, else iTXt, which is how ComfyUI writes its
    "prompt" and "workflow". Both go after IHDR, before the pixels.
    """
    if not (1 <= width < 2**31 and 1 <= height < 2**31):
        raise ValueError(f"a PNG is 1 to 2147483647 pixels each way, not {width}×{height}")
    stride = width * 3
    if len(rgb) != stride * height:
        raise ValueError(f"{width}×{height} RGB pixels are {stride * height} bytes, not {len(rgb)}")
    # Filter type 0 (None) on every row: the pictures are patterns that
    # deflate well as they are, and choosing filters per row costs Python time.
    raw = b"".join(b"\x00" + rgb[y * stride:(y + 1) * stride] for y in range(height))
    chunks = [SIGNATURE, _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))]
    chunks += [_text_chunk(k, v) for k, v in (plain or {}).items()]
    chunks += [_itxt(k, v) for k, v in (text or {}).items()]
    chunks += [_chunk(b"IDAT", zlib.compress(raw, _LEVEL)), _chunk(b"IEND", b"")]
    return b"".join(chunks)


def chunks(png: bytes) -> Iterator[tuple[bytes, bytes, int]]:
    """Each chunk's (type, data, offset of its length field), its CRC checked; ValueError if `png` is no PNG."""
    if not png.startswith(SIGNATURE):
        raise ValueError("not a PNG: it does not begin with PNG's 8-byte signature")
    at = len(SIGNATURE)
    first = True
    while at < len(png):
        if at + 12 > len(png):
            raise ValueError(f"not a whole PNG: it ends inside a chunk's header at byte {at}")
        (length,) = struct.unpack_from(">I", png, at)
        kind = png[at + 4:at + 8]
        end = at + 12 + length
        if end > len(png):
            raise ValueError(f"not a whole PNG: its {kind.decode('latin-1')!r} chunk runs past the end")
        data = png[at + 8:at + 8 + length]
        (crc,) = struct.unpack_from(">I", png, at + 8 + length)
        if zlib.crc32(kind + data) != crc:
            raise ValueError(f"a damaged PNG: its {kind.decode('latin-1')!r} chunk at byte {at} fails its CRC")
        if first and kind != b"IHDR":
            raise ValueError("not a PNG: its first chunk is not IHDR")
        first = False
        yield kind, data, at
        at = end
        if kind == b"IEND":
            return
    raise ValueError("not a whole PNG: it has no IEND chunk")


def size(png: bytes) -> tuple[int, int]:
    """(width, height) from the IHDR chunk."""
    for kind, data, _ in chunks(png):
        if kind == b"IHDR" and len(data) == 13:
            w, h = struct.unpack_from(">II", data)
            return int(w), int(h)
        break
    raise ValueError("not a PNG: its IHDR chunk is not 13 bytes")


def with_text(png: bytes, text: dict[str, str]) -> bytes:
    """`png` with `text` added as iTXt chunks right after IHDR; its own chunks are kept byte for byte."""
    after_ihdr = None
    for kind, data, at in chunks(png):  # the whole file is walked, so a damaged one is refused, not extended
        if kind == b"IHDR":
            after_ihdr = at + 12 + len(data)
    if after_ihdr is None:
        raise ValueError("not a PNG: it has no IHDR chunk")
    added = b"".join(_itxt(k, v) for k, v in text.items())
    return png[:after_ihdr] + added + png[after_ihdr:]


def read_text(png: bytes) -> dict[str, str]:
    """The text of the tEXt, zTXt and iTXt chunks, by keyword (a keyword given twice keeps its last)."""
    found: dict[str, str] = {}
    for kind, data, _ in chunks(png):
        if kind not in (b"tEXt", b"zTXt", b"iTXt"):
            continue
        keyword, sep, rest = data.partition(b"\x00")
        if not sep:
            raise ValueError(f"a damaged PNG: a {kind.decode()} chunk has no keyword separator")
        name = keyword.decode("latin-1")
        try:
            if kind == b"tEXt":
                found[name] = rest.decode("latin-1")
            elif kind == b"zTXt":
                found[name] = zlib.decompress(rest[1:]).decode("latin-1")
            else:
                if len(rest) < 2:
                    raise ValueError(f"a damaged PNG: the iTXt chunk {name!r} ends before its text")
                compressed = rest[0]
                _language, _, rest = rest[2:].partition(b"\x00")
                _translated, _, body = rest.partition(b"\x00")
                found[name] = (zlib.decompress(body) if compressed else body).decode("utf-8")
        except (zlib.error, UnicodeDecodeError) as e:
            raise ValueError(f"a damaged PNG: the text chunk {name!r} cannot be read: {e}") from None
    return found
