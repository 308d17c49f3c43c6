"""Compressed message bodies, against the reference codecs writing what RocketMQ 5's Java producer writes."""

from __future__ import annotations

import contextlib
import io
import struct
import zlib

import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol.compression import Compression, compress, compression_of, decompress
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.message_ext import CompressedBodyError, MessageExt, decompress_body
from ferrymq.protocol.sys_flag import COMPRESSED_FLAG

CONTENT = b"".join(b"order %d shipped to warehouse %d; " % (i, i % 7) for i in range(600))
LZ4_FLAG, ZSTD_FLAG, ZLIB_FLAG = 0x101, 0x201, 0x301


def java_lz4(data: bytes) -> bytes:
    """lz4-java's LZ4FrameOutputStream defaults: 4 MiB independent blocks, no content size or checksum."""
    return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False)


def java_zstd(data: bytes, level: int = 5) -> bytes:
    """zstd-jni's ZstdOutputStream: a frame written as a stream, so its header has no content size."""
    out = io.BytesIO()
    with zstandard.ZstdCompressor(level=level).stream_writer(out, closefd=False) as writer:
        writer.write(data)
    return out.getvalue()


JAVA_BODIES = [
    (0x1, zlib.compress(CONTENT, 5)),  # RocketMQ 4: the COMPRESSED bit only, zlib implied
    (ZLIB_FLAG, zlib.compress(CONTENT, 5)),
    (LZ4_FLAG, java_lz4(CONTENT)),
    (ZSTD_FLAG, java_zstd(CONTENT)),
]


@pytest.mark.parametrize(("sys_flag", "body"), JAVA_BODIES, ids=["legacy", "zlib", "lz4", "zstd"])
def test_bodies_written_as_the_java_producer_writes_them_decompress(sys_flag, body):
    assert zstandard.get_frame_parameters(JAVA_BODIES[3][1]).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(body, sys_flag | 0x8 | 0x10) == CONTENT  # other bits do not matter


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("level", [1, 5, 9])
def test_what_we_compress_reads_back_with_the_reference_decoders(compression, level):
    body = compress(CONTENT, compression, level)
    assert len(body) < len(CONTENT) // 4
    if compression is Compression.ZLIB:
        assert zlib.decompress(body) == CONTENT
    elif compression is Compression.LZ4:
        assert lz4.frame.decompress(body) == CONTENT
    else:
        assert zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read() == CONTENT
    assert decompress(body, compression.sys_flag) == CONTENT


def test_sys_flag_bits_are_rocketmqs():
    assert {c.name: c.sys_flag for c in Compression} == {"LZ4": 0x101, "ZSTD": 0x201, "ZLIB": 0x301}
    assert compression_of(COMPRESSED_FLAG) is Compression.ZLIB
    assert Compression.named(" Zstd ") is Compression.ZSTD
    with pytest.raises(ValueError, match="snappy"):
        Compression.named("snappy")


@pytest.mark.parametrize("value", [4, 5, 6, 7])
def test_an_unknown_compression_type_is_a_clear_error(value):
    with pytest.raises(ProtocolError, match=f"unknown compression type {value}"):
        decompress(zlib.compress(CONTENT), value << 8 | COMPRESSED_FLAG)


@pytest.mark.parametrize("compression", [Compression.LZ4, Compression.ZSTD])
def test_concatenated_frames_are_read_like_javas_input_streams(compression):
    body = compress(CONTENT[:100], compression, 3) + compress(CONTENT[100:], compression, 3)
    assert decompress(body, compression.sys_flag) == CONTENT


@pytest.mark.parametrize(("sys_flag", "body"), JAVA_BODIES, ids=["legacy", "zlib", "lz4", "zstd"])
def test_cut_or_empty_bodies_are_errors_not_short_bodies(sys_flag, body):
    for cut in (body[:-1], body[: len(body) // 2], b""):
        with pytest.raises(ProtocolError):
            decompress(cut, sys_flag)


def test_an_lz4_frame_claiming_an_absurd_size_is_refused_without_allocating_it():
    frame = bytearray(lz4.frame.compress(CONTENT, store_size=True))
    frame[6:14] = struct.pack("<Q", 1 << 62)  # the content size field of the frame descriptor
    refusals = set()
    for checksum in range(256):  # one of these is the descriptor's valid header checksum
        frame[14] = checksum
        with pytest.raises(ProtocolError) as refused:
            decompress(bytes(frame), LZ4_FLAG)
        refusals.add("checksum" in str(refused.value).lower())
    assert refusals == {True, False}  # it got past the header check once, and still failed cleanly


FLAGS = st.sampled_from([0x1, LZ4_FLAG, ZSTD_FLAG, ZLIB_FLAG, 0x401, 0x701])
PREFIXES = st.sampled_from([b"", b"\x78\x9c", b"\x04\x22\x4d\x18", b"\x28\xb5\x2f\xfd"])  # zlib, lz4, zstd


@settings(max_examples=1500, deadline=None)
@given(PREFIXES, st.binary(max_size=300), FLAGS)
def test_garbage_only_ever_raises_protocol_error(prefix, junk, sys_flag):
    with contextlib.suppress(ProtocolError):
        decompress(prefix + junk, sys_flag)


@settings(max_examples=1000, deadline=None)
@given(st.sampled_from(JAVA_BODIES), st.data())
def test_damaged_bodies_decompress_or_raise_protocol_error(flag_and_body, data):
    sys_flag, body = flag_and_body
    at = data.draw(st.integers(0, len(body) - 1))
    junk = data.draw(st.binary(min_size=1, max_size=6))
    with contextlib.suppress(ProtocolError):  # a flipped byte may land where nothing checks it
        decompress(body[:at] + junk + body[at + len(junk) :], sys_flag)


def test_decompress_body_gives_the_content_and_clears_the_compressed_bit():
    msg = MessageExt("T", java_zstd(CONTENT), {"UNIQ_KEY": "ID-1"}, sys_flag=ZSTD_FLAG | 0x8)
    assert decompress_body(msg) is msg
    assert (msg.body, msg.sys_flag) == (CONTENT, 0x208)
    assert decompress_body(msg).body == CONTENT  # a second call leaves the content alone


def test_a_body_that_does_not_decompress_names_its_message_and_is_left_as_stored():
    stored = java_lz4(CONTENT)[:-4]
    msg = MessageExt("Orders", stored, {"UNIQ_KEY": "ID-7"}, queue_id=2, queue_offset=41, sys_flag=LZ4_FLAG)
    with pytest.raises(CompressedBodyError, match=r"message ID-7 \(Orders queue 2 offset 41\).*LZ4") as e:
        decompress_body(msg)
    assert isinstance(e.value, ProtocolError) and e.value.message is msg
    assert (msg.body, msg.sys_flag) == (stored, LZ4_FLAG)
