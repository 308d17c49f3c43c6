"""RocketMQ remoting commands and their frames, with no I/O (the sans-I/O style of h11).

A transport feeds whatever bytes arrive into a ``FrameDecoder`` and writes whatever
``RemotingCommand.encode_parts`` returns; nothing here touches a socket or an event loop, so the
codec can be tested and fuzzed on its own.

Frame: ``int32 length`` (bytes after this field) · ``int32 serializeType<<24 | headerLength`` ·
header (JSON or ROCKETMQ binary) · body. All integers are big-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Annotated

import msgspec

from ferrymq._native import load
from ferrymq.protocol.codes import ONEWAY_FLAG, RESPONSE_FLAG, LanguageCode, SerializeType, Version
from ferrymq.protocol.errors import ProtocolError

MAX_FRAME_SIZE = 16 * 1024 * 1024
"""Largest frame accepted by default, length field included (Java's ``frameMaxLength``)."""

_MAX_HEADER_SIZE = 0xFFFFFF  # the header length lives in the low three bytes of a word
_MIN_FRAME_SIZE = 8  # length field + header-length word

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_PREFIX = struct.Struct(">iI")
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag


_LANGUAGE = LanguageCode.PYTHON
_VERSION = Version.V5_3_3


class RemotingProtocolError(ProtocolError):
    """Bytes that are not a valid remoting frame, header, custom header or body."""


BAD_JSON_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)
"""What msgspec raises on input that is not JSON (invalid UTF-8 inside a string is not a DecodeError)."""


def ext_str(value: object) -> str:
    """Stringify an extFields value the way Java does: booleans as ``true``/``false``, numbers in decimal."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return value if type(value) is str else str(value)


@dataclass(slots=True)
class RemotingCommand:
    """One request or response. ``code`` stays an ``int``: peers may send codes we do not know."""

    code: int
    language: LanguageCode = LanguageCode.PYTHON
    version: int = Version.V5_3_3
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes | memoryview = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def make_response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | memoryview = b"",
    ) -> RemotingCommand:
        """The answer to this request: same opaque, and the same header encoding the peer chose."""
        return RemotingCommand(  # positional: one call per answer, keywords cost more
            code, _LANGUAGE, _VERSION, self.opaque, RESPONSE_FLAG, remark,
            {} if ext_fields is None else ext_fields, body, self.serialize_type,
        )  # fmt: skip

    def encode_parts(self) -> tuple[bytes, bytes | memoryview]:
        """Length fields + header, and the body apart, so a large body is written without a copy."""
        if _native is not None:
            parts = _native.encode_parts(self)  # None for what only the Python encoder does
            if parts is not None:
                return parts
        return py_encode_parts(self)

    def encode(self) -> bytes:
        """The whole frame as one ``bytes``."""
        return b"".join(self.encode_parts())

    @classmethod
    def decode(cls, frame: bytes | memoryview) -> RemotingCommand:
        """Decode exactly one whole frame, length field included."""
        view = memoryview(frame)
        if len(view) < _MIN_FRAME_SIZE or _I32.unpack_from(view)[0] != len(view) - 4:
            raise RemotingProtocolError("length field does not match the frame size")
        return _decode_payload(view[4:])


class EncodedAnswer:
    """An answer whose frame is already encoded (a send's SUCCESS, built in one C call): what the
    dispatcher and a connection use of an answer, without a RemotingCommand and its header dict.
    ``opaque`` and ``flag`` are written into the frame by whoever encoded it."""

    __slots__ = ("code", "flag", "frame", "opaque")

    def __init__(self, code: int, opaque: int, frame: bytes) -> None:
        self.code = code
        self.opaque = opaque
        self.flag = RESPONSE_FLAG
        self.frame = frame

    def encode_parts(self) -> tuple[bytes, bytes]:
        return self.frame, b""


Answer = RemotingCommand | EncodedAnswer
"""What a handler answers with and a connection writes."""

ANSWER_HEAD = b'{"code":0,"language":"%s","version":%d,"opaque":' % (_LANGUAGE.name.encode(), _VERSION)
"""How this side's JSON header of a SUCCESS answer begins, up to its opaque (for encoders of answers
that build the frame in one go, as the send path's in C)."""


class FrameDecoder:
    """Cuts a byte stream into commands, keeping a partial frame until the rest arrives.

    An oversized or malformed length is rejected as soon as its four bytes arrive, before the frame is
    buffered. After an error the stream has lost its framing: the connection must be closed.
    """

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._needed = 4  # how many buffered bytes the next step (length field, or whole frame) needs

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back (non-zero at EOF means a truncated frame)."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Take the next bytes of the stream; return every command they complete, in order."""
        if self._buffer:
            self._buffer += data
            if len(self._buffer) < self._needed:
                return []
            data = bytes(self._buffer)
            self._buffer.clear()
        elif type(data) is not bytes:
            data = bytes(data)  # bodies are views into it: the caller must not be able to change them
        commands, pos, self._needed = _split(data, self.max_frame_size)
        if pos < len(data):
            self._buffer += memoryview(data)[pos:]
        return commands


def py_encode_parts(command: RemotingCommand) -> tuple[bytes, bytes | memoryview]:
    """``RemotingCommand.encode_parts`` in Python: the reference for the C version
    (ferrymq/_native/remoting.c), and the encoder of what that one leaves to it."""
    try:
        header = _HEADER_ENCODERS[command.serialize_type](command)
        if len(header) > _MAX_HEADER_SIZE:
            raise RemotingProtocolError(f"header of {len(header)} bytes does not fit 24 bits")
        prefix = _PREFIX.pack(4 + len(header) + len(command.body), command.serialize_type << 24 | len(header))
    except struct.error as exc:
        raise RemotingProtocolError(f"cannot encode {command.serialize_type.name} header: {exc}") from None
    return prefix + header, command.body


def py_split(data: bytes, max_frame_size: int) -> tuple[list[RemotingCommand], int, int]:
    """The whole frames at the start of ``data``: (their commands, where the rest starts, how many
    bytes the next step needs). The reference for the C version that ``FrameDecoder`` uses when built."""
    view = memoryview(data)
    commands: list[RemotingCommand] = []
    pos, end = 0, len(view)
    while True:
        if end - pos < 4:
            return commands, pos, 4
        size = 4 + _I32.unpack_from(view, pos)[0]
        if size < _MIN_FRAME_SIZE:
            raise RemotingProtocolError(f"frame length {size - 4} is shorter than its header word")
        if size > max_frame_size:
            raise RemotingProtocolError(f"frame of {size} bytes exceeds the {max_frame_size} cap")
        if end - pos < size:
            return commands, pos, size
        commands.append(_decode_payload(view[pos + 4 : pos + size]))
        pos += size


def _decode_payload(view: memoryview) -> RemotingCommand:
    """Decode what follows a frame's length field: header word, header, body."""
    (word,) = _U32.unpack_from(view)
    header_end = 4 + (word & _MAX_HEADER_SIZE)
    if header_end > len(view):
        raise RemotingProtocolError(f"header length {header_end - 4} exceeds the frame")
    try:
        serialize_type, decode_header = _HEADER_DECODERS[word >> 24]
    except KeyError:
        raise RemotingProtocolError(f"unknown serialize type {word >> 24}") from None
    return RemotingCommand(
        *decode_header(view[4:header_end]),
        body=view[header_end:] if len(view) > header_end else b"",
        serialize_type=serialize_type,
    )


# What a header decoder returns: code, language, version, opaque, flag, remark, ext_fields.
_Header = tuple[int, LanguageCode, int, int, int, str | None, dict[str, str]]

# Lenient: a language's name or number; one we do not know is OTHER rather than a failed request.
_LANGUAGES: dict[str | int, LanguageCode] = {
    key: lang for lang in LanguageCode for key in (lang.name, lang.value)
}


# --- JSON headers (serialize type 0) -----------------------------------------------------------

_Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]


class _JsonHeader(msgspec.Struct, gc=False):
    """What we read from a JSON header: missing fields default, unknown ones are ignored."""

    code: _Int32 = 0
    language: str | int = "OTHER"
    version: _Int32 = 0
    opaque: _Int32 = 0
    flag: _Int32 = 0
    remark: str | None = None
    ext_fields: dict[str, str] | None = msgspec.field(default=None, name="extFields")


class _LooseJsonHeader(_JsonHeader):
    """The slower second try, for peers that send extFields values as JSON numbers (the C++ client)."""

    ext_fields: dict[str, str | int | float | bool | None] | None = msgspec.field(  # type: ignore[assignment]
        default=None, name="extFields"
    )


_JSON_HEADER_DECODER = msgspec.json.Decoder(_JsonHeader, strict=False)
_LOOSE_JSON_HEADER_DECODER = msgspec.json.Decoder(_LooseJsonHeader, strict=False)
_JSON_ENCODER = msgspec.json.Encoder()


def _decode_json_header(data: memoryview) -> _Header:
    try:
        try:
            header = _JSON_HEADER_DECODER.decode(data)
        except msgspec.ValidationError:
            header = _LOOSE_JSON_HEADER_DECODER.decode(data)
            if header.ext_fields:
                header.ext_fields = {k: ext_str(v) for k, v in header.ext_fields.items() if v is not None}
    except BAD_JSON_ERRORS as exc:
        raise RemotingProtocolError(f"bad JSON header: {exc}") from None
    return (
        header.code,
        _LANGUAGES.get(header.language, LanguageCode.OTHER),
        header.version,
        header.opaque,
        header.flag,
        header.remark,
        header.ext_fields or {},
    )


def _encode_json_header(command: RemotingCommand) -> bytes:
    header: dict[str, object] = {
        "code": command.code,
        "language": command.language.name,
        "version": command.version,
        "opaque": command.opaque,
        "flag": command.flag,
    }
    if command.remark is not None:
        header["remark"] = command.remark
    if command.ext_fields:
        header["extFields"] = {
            k: v if type(v) is str else ext_str(v) for k, v in command.ext_fields.items() if v is not None
        }  # most values are strings already: skip the call for them (this runs for every frame)
    return _JSON_ENCODER.encode(header)


# --- ROCKETMQ binary headers (serialize type 1) ------------------------------------------------


def _decode_binary_header(view: memoryview) -> _Header:
    data = view.tobytes()  # headers are small, and slicing bytes is much cheaper than slicing a view
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(data)
        (remark_len,) = _I32.unpack_from(data, _BINARY_FIXED.size)
        if remark_len < 0:
            raise RemotingProtocolError(f"remark length {remark_len} is negative")
        pos = _BINARY_FIXED.size + 4 + remark_len
        (ext_len,) = _I32.unpack_from(data, pos)
        remark = data[pos - remark_len : pos].decode() if remark_len else None  # Java: empty means null
        pos += 4
        end = pos + ext_len
        if ext_len < 0 or end > len(data):
            raise RemotingProtocolError(f"extFields length {ext_len} exceeds the header")
        ext = {}
        while pos < end:
            (key_len,) = _I16.unpack_from(data, pos)
            key_end = pos + 2 + key_len
            if key_len < 0 or key_end + 4 > end:
                raise RemotingProtocolError(f"extFields key length {key_len} exceeds the header")
            (value_len,) = _I32.unpack_from(data, key_end)
            pos = key_end + 4 + value_len
            if value_len < 0 or pos > end:
                raise RemotingProtocolError(f"extFields value length {value_len} exceeds the header")
            if key_len and value_len:  # Java reads empty strings back as null
                ext[data[key_end - key_len : key_end].decode()] = data[pos - value_len : pos].decode()
    except struct.error:
        raise RemotingProtocolError("truncated binary header") from None
    except UnicodeDecodeError:
        raise RemotingProtocolError("binary header string is not UTF-8") from None
    return code, _LANGUAGES.get(language, LanguageCode.OTHER), version, opaque, flag, remark, ext


def _encode_binary_header(command: RemotingCommand) -> bytes:
    remark = command.remark.encode() if command.remark else b""
    ext = bytearray()
    for key, value in command.ext_fields.items():
        if value is None:
            continue
        key_bytes, value_bytes = key.encode(), ext_str(value).encode()
        ext += _I16.pack(len(key_bytes))
        ext += key_bytes
        ext += _I32.pack(len(value_bytes))
        ext += value_bytes
    fixed = _BINARY_FIXED.pack(command.code, command.language, command.version, command.opaque, command.flag)
    return b"".join((fixed, _I32.pack(len(remark)), remark, _I32.pack(len(ext)), ext))


_HEADER_DECODERS = {
    SerializeType.JSON: (SerializeType.JSON, _decode_json_header),
    SerializeType.ROCKETMQ: (SerializeType.ROCKETMQ, _decode_binary_header),
}
_HEADER_ENCODERS = {SerializeType.JSON: _encode_json_header, SerializeType.ROCKETMQ: _encode_binary_header}

_native = load("remoting")
if _native is not None:
    _native.bind(
        RemotingCommand,
        _LANGUAGES,
        LanguageCode.OTHER,
        {lang: lang.name for lang in LanguageCode},
        (SerializeType.JSON, SerializeType.ROCKETMQ),
        RemotingProtocolError,
        _decode_payload,
    )
_split = _native.split if _native is not None else py_split
