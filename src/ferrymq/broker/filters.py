"""Subscription expressions, compiled once and cached: TAG (`"TagA || TagB"`, checked against the
tag hashes in the ConsumeQueue by the store) and SQL92 (evaluated here against each message's
properties, when the broker's `enable_property_filter` is on, as RocketMQ's is not by default).
"""

from __future__ import annotations

from ferrymq.broker.sql92 import SqlFilter, SqlFilterError
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.hashes import java_hash
from ferrymq.protocol.properties import find_property
from ferrymq.protocol.record import read_record_meta
from ferrymq.store import GetResult, GetStatus

TAG_TYPE, SQL92_TYPE = "TAG", "SQL92"
CACHE_SIZE = 4096


class FilterError(ValueError):
    """An expression the broker cannot evaluate: a bad one, or SQL92 while it is turned off."""

    code = ResponseCode.SUBSCRIPTION_PARSE_FAILED  # the answer to the pull or check that used it


class FilterDisabled(FilterError):
    code = ResponseCode.SYSTEM_ERROR  # as RocketMQ answers while enablePropertyFilter is off


class SubscriptionFilter:
    """What a pull filters by: `tag_codes` for the store (None: every tag), and an optional SQL92
    filter that `narrow` applies to what the store found."""

    __slots__ = ("_keys", "sql", "tag_codes")

    def __init__(self, tag_codes: frozenset[int] | None, sql: SqlFilter | None = None) -> None:
        self.tag_codes = tag_codes
        self.sql = sql
        self._keys = [(name, name.encode() + b"\x01") for name in sorted(sql.names)] if sql else []

    def narrow(self, result: GetResult) -> GetResult:
        """Keep the found messages whose properties match the SQL92 filter (zero-copy slices)."""
        sql = self.sql
        if sql is None or result.status is not GetStatus.FOUND:
            return result
        kept: list[memoryview] = []
        total = 0
        for run in result.buffers:  # a run holds consecutive whole records
            pos, end = 0, len(run)
            while pos < end:
                meta = read_record_meta(run, pos, end)
                if not isinstance(meta, tuple):
                    break  # cannot happen for dispatched records; never loop on garbage
                if self._matches(sql, run[meta.props_start : meta.props_end]):
                    kept.append(run[pos : pos + meta.size])
                    total += meta.size
                pos += meta.size
        status = GetStatus.FOUND if kept else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, result.next_begin_offset, result.min_offset, result.max_offset, kept,
                         len(kept), total)  # fmt: skip

    def _matches(self, sql: SqlFilter, raw_properties: memoryview) -> bool:
        """Evaluate against the properties the expression reads, found without decoding the rest."""
        raw = bytes(raw_properties)
        values = {}
        for name, key in self._keys:
            value = find_property(raw, key)
            if value is not None:
                try:
                    values[name] = value.decode()
                except UnicodeDecodeError:  # not UTF-8: matches no expression
                    return False
        return sql.matches(values)


EVERY_MESSAGE = SubscriptionFilter(None)


class FilterCache:
    """Compiled subscriptions by (type, expression): a pull looks its filter up, never re-parses it."""

    def __init__(self, enable_property_filter: bool) -> None:
        self.enable_property_filter = enable_property_filter
        self._compiled: dict[tuple[str, str], SubscriptionFilter] = {}

    def get(self, expression: str | None, expression_type: str | None) -> SubscriptionFilter:
        key = ((expression_type or TAG_TYPE).upper(), expression or "")
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compile(*key)
            if len(self._compiled) >= CACHE_SIZE:
                self._compiled.clear()
            self._compiled[key] = compiled
        return compiled

    def _compile(self, expression_type: str, expression: str) -> SubscriptionFilter:
        if expression_type == TAG_TYPE:
            return tag_filter(expression)
        if expression_type != SQL92_TYPE:
            raise FilterError(f"unknown expression type {expression_type}: use TAG or SQL92")
        if not self.enable_property_filter:
            raise FilterDisabled(
                "The broker does not support consumer to filter message by SQL92 "
                "(set enable_property_filter = true on the broker)"
            )
        try:
            return SubscriptionFilter(None, SqlFilter(expression))
        except SqlFilterError as e:
            raise FilterError(f"bad SQL92 expression {expression!r}: {e}") from None


def tag_filter(expression: str) -> SubscriptionFilter:
    """`"TagA || TagB"` as the tags' hashes; every message for `*` or nothing."""
    if expression.strip() in ("", "*"):
        return EVERY_MESSAGE
    tags = [t.strip() for t in expression.split("||")]
    if any(not t for t in tags):
        raise FilterError(f"bad tag expression {expression!r}: empty tag between ||")
    return SubscriptionFilter(frozenset(java_hash(t) for t in tags))
