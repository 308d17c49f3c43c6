"""Java's String.hashCode, which RocketMQ uses for tag hashes, index keys and queue selection."""

from __future__ import annotations

import functools
import sys

_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_BASE31 = b"0123456789abcdefghijklmnopqrstu"
_HIGH_DIGIT = bytes(_BASE31[b // 31] for b in range(256))
_LOW_DIGIT = bytes(_BASE31[b % 31] for b in range(256))
_FAST_HASH_MAX_LEN = 639  # int() parses up to 640 digits whatever sys.set_int_max_str_digits says


def java_hash(s: str) -> int:
    """Java's String.hashCode as a signed 32-bit int.

    For ASCII the hash is the bytes read as a base-31 number (mod 2**32); splitting each byte into
    two base-31 digits (b = 31*high + low) lets int() do that sum in C. It runs for every tag and
    index key the dispatcher sees, so it is worth the trick.
    """
    if s.isascii() and len(s) <= _FAST_HASH_MAX_LEN:
        raw = s.encode()
        h = (
            int(b"0" + raw.translate(_HIGH_DIGIT), 31) * 31 + int(b"0" + raw.translate(_LOW_DIGIT), 31)
        ) & 0xFFFFFFFF
    else:
        h = 0
        for unit in memoryview(s.encode(_UTF16)).cast("H"):  # UTF-16 code units, as Java counts them
            h = (h * 31 + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=1 << 16)
def tag_hash(tag: bytes) -> int:
    """The ConsumeQueue hash of a raw TAGS value (Java's hashCode), cached: topics reuse few tags."""
    return java_hash(tag.decode(errors="replace"))
