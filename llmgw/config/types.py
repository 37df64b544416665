"""The value types a configuration file is written in: durations, sizes, addresses.

Each parses from the text a person writes ("10s", "256MB", ":8080") and
prints back to the shortest text that parses to the same value, so a
document written by `to_dict` reads the way a person would have written it.
A value that does not parse raises ValueError with the sentence the loader
puts after the key's path: "expected a size like 256MB, got "lots"".
"""

from __future__ import annotations

import ipaddress
import json
import re

__all__ = ["Address", "AddressOrOff", "Duration", "Size", "describe"]


def describe(value: object) -> str:
    """How a wrong value is quoted back in an error: as the file showed it."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


# Durations are held as whole microseconds while parsing and printing, so
# "100ms" is exactly 0.1 and prints back as "100ms", not "99.99999ms".
_US = {"d": 86_400_000_000, "h": 3_600_000_000, "m": 60_000_000, "s": 1_000_000, "ms": 1_000, "us": 1}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|d|h|m|s)")
_DURATION_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|us|d|h|m|s))+")


class Duration(float):
    """A span of time in seconds, written like 250ms, 10s, 5m, 1h30m or 7d.

    A bare number is refused (except 0): "timeout: 10" could mean seconds
    or milliseconds, and guessing wrong is a thousandfold mistake.
    """

    def __new__(cls, value: str | float | int = 0) -> Duration:
        if isinstance(value, Duration):
            return super().__new__(cls, float(value))
        if isinstance(value, str):
            return super().__new__(cls, _parse_duration(value))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a duration like 10s, got {describe(value)}")
        if value < 0:
            raise ValueError(f"expected a duration like 10s, got {describe(value)}; a duration can't be negative")
        return super().__new__(cls, float(value))

    @classmethod
    def parse(cls, value: object) -> Duration:
        """Read a duration as a file gives it: text, or the number 0."""
        if isinstance(value, Duration):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
            return cls(0)
        if not isinstance(value, str):
            raise ValueError(f"expected a duration like 10s, got {describe(value)}")
        return cls(value)

    def __str__(self) -> str:
        us = round(float(self) * 1_000_000)
        if us == 0:
            return "0s"
        parts = []
        for unit in ("d", "h", "m", "s"):
            n, us = divmod(us, _US[unit])
            if n:
                parts.append(f"{n}{unit}")
        if us:
            ms, rest = divmod(us, 1000)
            parts.append(f"{ms}ms" if rest == 0 else f"{us}us")
        return "".join(parts)

    def __repr__(self) -> str:
        return f"Duration({str(self)!r})"

    def __reduce__(self) -> tuple[type[Duration], tuple[float]]:
        return (Duration, (float(self),))


def _parse_duration(text: str) -> float:
    s = text.strip()
    if s == "0":
        return 0.0
    if not _DURATION_WHOLE.fullmatch(s):
        hint = ""
        if re.fullmatch(r"\d+(?:\.\d+)?", s):
            hint = f"; say which unit, as in {s}s or {s}ms"
        raise ValueError(f"expected a duration like 10s, got {describe(text)}{hint}")
    us = 0
    for number, unit in _DURATION_PART.findall(s):
        us += round(float(number) * _US[unit])
    return us / 1_000_000


# Sizes count in powers of 1024 whichever way the unit is written: the Go
# original wrote "max_entry_bytes: 2097152 # 2 MB", and the sizes set here
# (caches held in memory) are the kind people count in binary units.
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}
_SIZE_NAMES = (("PB", 1024**5), ("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2), ("KB", 1024))
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([kmgtp])(?:i?b)?|(b))?", re.IGNORECASE)


class Size(int):
    """A number of bytes, written like 512KB, 256MB or 1GiB, or as plain bytes.

    KB, MB and GB are 1024-based, the same as KiB, MiB and GiB.
    """

    def __new__(cls, value: str | int = 0) -> Size:
        if isinstance(value, Size):
            return super().__new__(cls, int(value))
        if isinstance(value, str):
            return super().__new__(cls, _parse_size(value))
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a size like 256MB, got {describe(value)}")
        if value < 0:
            raise ValueError(f"expected a size like 256MB, got {describe(value)}; a size can't be negative")
        return super().__new__(cls, value)

    @classmethod
    def parse(cls, value: object) -> Size:
        """Read a size as a file gives it: text, or a whole number of bytes."""
        return cls(value)  # type: ignore[arg-type]

    def __str__(self) -> str:
        n = int(self)
        if n == 0:
            return "0B"
        for name, unit in _SIZE_NAMES:
            if n % unit == 0:
                return f"{n // unit}{name}"
        return f"{n}B"

    def __repr__(self) -> str:
        return f"Size({str(self)!r})"

    def __reduce__(self) -> tuple[type[Size], tuple[int]]:
        return (Size, (int(self),))


def _parse_size(text: str) -> int:
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"expected a size like 256MB, got {describe(text)}")
    number, unit, _bytes = m.groups()
    value = float(number) * _SIZE_UNITS[(unit or "").lower()]
    if value != int(value):
        raise ValueError(f"expected a size like 256MB, got {describe(text)}; that is not a whole number of bytes")
    return int(value)


class Address(str):
    """A listener's address, HOST:PORT: ":8080" (every interface), "127.0.0.1:9090", "[::1]:8080".

    Kept as the text it was written in, with `host` ("" for every interface)
    and `port` read from it. Port 0 asks the system for a free one, which is
    what tests do.
    """

    host: str
    port: int

    _EXAMPLE = "expected an address like :8080 or 127.0.0.1:9090"

    def __new__(cls, value: str = ":0") -> Address:
        if isinstance(value, Address) and type(value) is cls:
            return value
        if not isinstance(value, str):
            raise ValueError(f"{cls._EXAMPLE}, got {describe(value)}")
        text = value.strip()
        host, port = cls._split(value, text)
        self = super().__new__(cls, text)
        self.host, self.port = host, port
        return self

    @classmethod
    def parse(cls, value: object) -> Address:
        return cls(value)  # type: ignore[arg-type]

    @classmethod
    def _split(cls, original: str, text: str) -> tuple[str, int]:
        if text.lower() == "off":
            raise ValueError(f"{cls._EXAMPLE}, got {describe(original)}; this listener can't be turned off")
        if text.startswith("["):
            end = text.find("]")
            if end < 0 or text[end + 1 : end + 2] != ":":
                raise ValueError(f"{cls._EXAMPLE}, got {describe(original)}")
            host, port_text = text[1:end], text[end + 2 :]
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                raise ValueError(f"{cls._EXAMPLE}, got {describe(original)}; {host} is not an IPv6 address") from None
        else:
            host, sep, port_text = text.rpartition(":")
            if not sep:
                raise ValueError(f"{cls._EXAMPLE}, got {describe(original)}; the port is missing")
            if ":" in host:
                raise ValueError(f"{cls._EXAMPLE}, got {describe(original)}; "
                                 "write an IPv6 host in brackets, as in [::1]:8080")
            if host and not re.fullmatch(r"[A-Za-z0-9.\-_]+", host):
                raise ValueError(f"{cls._EXAMPLE}, got {describe(original)}")
        if not port_text.isdigit() or int(port_text) > 65535:
            raise ValueError(f"{cls._EXAMPLE}, got {describe(original)}; the port must be a number from 0 to 65535")
        return host, int(port_text)

    @property
    def off(self) -> bool:
        return False

    @property
    def all_interfaces(self) -> bool:
        return self.host in ("", "0.0.0.0", "::")  # noqa: S104 - read, not bound

    @property
    def is_loopback(self) -> bool:
        """Whether only this machine can reach it."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[type[Address], tuple[str]]:
        return (type(self), (str(self),))


class AddressOrOff(Address):
    """A listener that may be turned off: an address, or the word off."""

    def __new__(cls, value: str = "off") -> AddressOrOff:
        if isinstance(value, str) and value.strip().lower() == "off":
            self = str.__new__(cls, "off")
            self.host, self.port = "", 0
            return self
        return super().__new__(cls, value)  # type: ignore[return-value]

    _EXAMPLE = "expected an address like :9091, or off"

    @property
    def off(self) -> bool:
        return str(self) == "off"

    @property
    def is_loopback(self) -> bool:
        return not self.off and super().is_loopback
