"""Message bodies compressed by RocketMQ producers, in the formats RocketMQ 5's Java client writes.

A compressed body has sysFlag's COMPRESSED bit; bits 8-10 name the codec (CompressionType):
1 LZ4 in the LZ4 frame format (lz4-java's LZ4FrameOutputStream: independent 4 MiB blocks, no
content size), 2 zstd standard frames written as a stream (zstd-jni's ZstdOutputStream, so the
frame header carries no content size), 3 a zlib stream (java.util.zip.Deflater). 0 is zlib too:
RocketMQ 4 producers set only the COMPRESSED bit. Readers take concatenated LZ4 and zstd frames, as
the Java input streams do. Anything that does not decompress raises ProtocolError, whatever the
codec library raised.
"""

from __future__ import annotations

import enum
import threading
import zlib

import lz4.frame
import zstandard
from isal import isal_zlib

from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.sys_flag import COMPRESSED_FLAG, COMPRESSION_TYPE_MASK


class Compression(enum.IntEnum):
    """RocketMQ's CompressionType: the value kept in sysFlag bits 8-10."""

    LZ4 = 1
    ZSTD = 2
    ZLIB = 3

    @property
    def sys_flag(self) -> int:
        """The sysFlag bits of a body compressed this way (COMPRESSED and the type)."""
        return COMPRESSED_FLAG | self << 8

    @classmethod
    def named(cls, name: str) -> Compression:
        """The codec for a name as RocketMQ spells it (rocketmq.message.compressType), any case."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown compression {name!r}: choose zlib, lz4 or zstd") from None


def compression_of(sys_flag: int) -> Compression:
    """The codec of a compressed body with this sysFlag; ProtocolError for the unused values 4-7."""
    value = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    if value == 0:
        return Compression.ZLIB
    try:
        return Compression(value)
    except ValueError:
        raise ProtocolError(f"unknown compression type {value} (sysFlag {sys_flag:#x})") from None


def compress(body: bytes, compression: Compression, level: int) -> bytes:
    """`body` as the Java producer compresses it; `level` is zlib's or zstd's (LZ4 takes none, like Java).

    zlib levels 1-3 go through ISA-L, several times faster than zlib at a like ratio.
    """
    if compression is Compression.ZLIB:
        return isal_zlib.compress(body, level) if 1 <= level <= 3 else zlib.compress(body, level)
    if compression is Compression.LZ4:
        return lz4.frame.compress(body, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False)
    return zstandard.ZstdCompressor(level=level, write_content_size=False).compress(body)


def decompress(body: bytes, sys_flag: int) -> bytes:
    """The content of a body stored with the COMPRESSED bit; ProtocolError if it does not decompress."""
    compression = compression_of(sys_flag)
    try:
        if compression is Compression.ZLIB:
            return isal_zlib.decompress(body)  # like Java's InflaterInputStream, ignores bytes after the end
        if compression is Compression.LZ4:
            return _frames(lz4.frame.LZ4FrameDecompressor, body)
        return _frames(_zstd_decompressor, body)
    except Exception as e:  # the codecs raise RuntimeError, ValueError, their own errors...
        raise ProtocolError(f"corrupt {compression.name} body: {e or type(e).__name__}") from None


def _frames(new_decompressor, body: bytes) -> bytes:
    """Every frame of `body`, one decompressor each; a frame cut short is an error, not a short body.

    The streaming decompressors never trust a frame header's content size (a garbage one would
    otherwise ask for exabytes up front).
    """
    out = []
    rest = body
    while True:
        d = new_decompressor()
        out.append(d.decompress(rest))
        if not d.eof:
            raise EOFError(f"the body ends inside a frame ({len(body)} bytes)")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


def _zstd_decompressor():
    """A decompressor of one frame. Its context (20 us to make) is kept per thread: zstd contexts
    must not be shared between threads."""
    context = getattr(_per_thread, "zstd", None)
    if context is None:
        context = _per_thread.zstd = zstandard.ZstdDecompressor()
    return context.decompressobj(write_size=1 << 16)


_per_thread = threading.local()
