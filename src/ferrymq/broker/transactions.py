"""Transactional messages: half messages, their commit or rollback, and the check-back service.

RocketMQ's design, in our words. A half message is stored in RMQ_SYS_TRANS_HALF_TOPIC (queue 0)
with its real topic and queue in REAL_TOPIC/REAL_QID, so no consumer sees it. END_TRANSACTION
commits it (re-put to its real topic) or rolls it back; either way an op record (tag `d`, body =
the half message's queue offset) goes to RMQ_SYS_TRANS_OP_HALF_TOPIC, which is what makes the
outcome survive restarts. A periodic check walks the half queue from its cursor: a message without
an op record and older than `transaction_timeout` is re-appended to the half queue with
TRANSACTION_CHECK_TIMES + 1 and the producer group is asked CHECK_TRANSACTION_STATE for the copy;
after `transaction_check_max` checks it is moved to TRANS_CHECK_MAX_TIME_TOPIC instead.

Unlike RocketMQ, every copy remembers the queue offset of the first half message in
TRAN_PREPARED_QUEUE_OFFSET (its "origin"), and op records name origins: so an END_TRANSACTION for an
older copy of a transaction that is already ended is ignored, and nothing is committed twice.
What must be remembered is small: the origins ended whose copies the cursor has not yet passed.

A slave acting for its missing master (enable_slave_acting_master) checks back from its copy of the
log without writing to it: it learns what its master ended from the op records it copied (`load`),
asks producers about the half messages due a check, escapes the commits they answer to another
master, and remembers the origins it ended in a file of its own (config/actingEndedTransactions.json,
written before the answer, so a restart of the slave does not end them again); the returning
master takes them over and writes their op records (`reclaim`).

A commit the master stored and had not replicated when it died would be committed again by the slave
(the producer, asked, says COMMIT once more). So a master whose slave may act for it stores an
intent first — an op record tagged `i` naming the origin — and commits only once its connected
slaves have it (schedule/intents.py). A slave that finds an intent without its op record in its copy
leaves that transaction to the master, whose log knows whether it committed, for
`slave_acting_undecided_timeout`; then it asks the producer (at least once). A rollback stores
nothing a consumer can read: asking about it again is harmless, and it goes without an intent.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec

from ferrymq.broker.clients import ClientRegistry
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.persisted import load_json, save_json
from ferrymq.broker.schedule.divert import ScheduleError
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.net.errors import RemotingError
from ferrymq.protocol.bodies import Body
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.headers import CheckTransactionStateRequestHeader
from ferrymq.protocol.message_ext import MessageExt, decode_record, decode_records
from ferrymq.protocol.message_id import offset_msg_id
from ferrymq.protocol.properties import Prop, encode_properties, find_property
from ferrymq.protocol.record import pack_host
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.sys_flag import TRANSACTION_COMMIT_TYPE, TRANSACTION_TYPE_MASK
from ferrymq.protocol.topic_names import CHECK_MAX_TIME_TOPIC, HALF_TOPIC, OP_TOPIC
from ferrymq.store import MessageStore, PutResult, PutStatus

log = logging.getLogger(__name__)

CHECK_GROUP = "CID_RMQ_SYS_TRANS"  # the group whose offsets hold the checker's cursors
OP_TAG = "d"
INTENT_TAG = "i"  # an op record saying the master is about to commit the origins it names
ORIGIN = "TRAN_PREPARED_QUEUE_OFFSET"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
_SCAN_BATCH = 64
_OP_PROPS = encode_properties({Prop.TAGS: OP_TAG}).encode()
_INTENT_PROPS = encode_properties({Prop.TAGS: INTENT_TAG}).encode()


class ActingEnded(Body):
    """The origins of the transactions a slave acting for its master ended (not yet handed back)."""

    origins: list[int] = msgspec.field(default_factory=list)


class EndError(Exception):
    """An END_TRANSACTION that names no half message of this producer group."""


class TransactionService:
    def __init__(
        self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
        offsets: ConsumerOffsetManager, clients: ClientRegistry, *,
        divert: Callable[[bytes, str, int, int], tuple[str, int, bytes] | None],
        put: Callable[[PutCommand], Awaitable[PutResult]], written: Callable[[], None],
        topics_changed: Callable[[], None],
    ) -> None:  # fmt: skip
        """`divert`: the scheduler's (a committed message with a delay waits); `put`: the broker's
        writer (in DLedger mode every record goes through Raft); `written`: after every put;
        `topics_changed`: after the system topics were created (tell the NameServers)."""
        self.store = store
        self._store_put = put
        # END_TRANSACTION and the check wait for their puts: one at a time decides what is ended
        self._deciding = asyncio.Lock()
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self._divert = divert
        self._after_put = written
        self._topics_changed = topics_changed
        self.timeout_ms = config.transaction_timeout
        self.check_max = config.transaction_check_max
        self.half_cursor = 0  # every half message below it is ended, re-appended or discarded
        self.ended: dict[int, int] = {}  # origin -> op queue offset of its op record
        self.copies_ahead: dict[int, int] = {}  # origin -> copies at or past the cursor
        self.counts = {"committed": 0, "rolledBack": 0, "checked": 0}
        self._acting_path = config.store.config_dir / "actingEndedTransactions.json"
        # origins a slave acting for its master ended
        self.acting_ended: set[int] = set(load_json(self._acting_path, ActingEnded).origins)
        self._acting_checks: dict[int, int] = {}  # origin -> check-backs asked while acting
        # Said before a commit is stored (schedule/intents.py): False means not now. The default:
        # no slave may act for this broker.
        self._intend: Callable[[PutCommand, str], Awaitable[bool]] = _no_intent
        self._ending: dict[int, int] = {}  # origin -> op queue offset at or after its intent: committing
        # origins an intent names and no op record ends, in a slave's copy of its master's log
        self.undecided: set[int] = set()
        self.undecided_timeout = config.slave_acting_undecided_timeout / 1000
        self._undecided_until = 0.0  # monotonic time until which an acting slave leaves them alone

    def intend_by(self, intend: Callable[[PutCommand, str], Awaitable[bool]]) -> None:
        """What to say before a commit is stored (see schedule/intents.py)."""
        self._intend = intend

    # --- start-up ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuild the in-memory state from the cursors, the op queue and the pending half messages
        (at start, and on a DLedger member becoming leader: its followers' store took the old
        leader's commits and rollbacks, this state did not)."""
        offsets, store = self.offsets, self.store
        self.ended, self.copies_ahead = {}, {}
        self.half_cursor = max(
            offsets.query(CHECK_GROUP, HALF_TOPIC, 0) or 0, store.get_min_offset(HALF_TOPIC, 0)
        )
        op_from = max(offsets.query(CHECK_GROUP, OP_TOPIC, 0) or 0, store.get_min_offset(OP_TOPIC, 0))
        for msg in self._read(HALF_TOPIC, self.half_cursor, store.get_max_offset(HALF_TOPIC, 0)):
            origin = _origin(msg)
            if origin != msg.queue_offset:
                self.copies_ahead[origin] = self.copies_ahead.get(origin, 0) + 1
        intended: set[int] = set()
        for msg in self._read(OP_TOPIC, op_from, store.get_max_offset(OP_TOPIC, 0)):
            if msg.properties.get(Prop.TAGS) == INTENT_TAG:
                intended.update(_op_origins(msg.body))
                continue
            for origin in _op_origins(msg.body):
                self.ended.setdefault(origin, msg.queue_offset)
        self._prune()
        cursor, ahead = self.half_cursor, self.copies_ahead
        self.undecided = {o for o in intended if o not in self.ended and (o >= cursor or o in ahead)}

    def start_acting(self) -> None:
        """This slave acts for its master from now on: what its copy of the log says is still open,
        and how long it leaves the undecided commits to the master."""
        self.load()
        self._undecided_until = time.monotonic() + self.undecided_timeout
        if self.undecided:
            log.warning("%d transactions the master may have committed are left to it for %.0f s",
                        len(self.undecided), self.undecided_timeout)  # fmt: skip

    def _read(self, topic: str, start: int, end: int):
        """The messages of queue 0 of `topic` from `start` to `end`, decoded, in batches."""
        offset = start
        while offset < end:
            result = self.store.get_messages(topic, 0, offset, min(_SCAN_BATCH, end - offset), 1 << 30)
            if not result.message_count:
                if result.next_begin_offset <= offset:
                    return
                offset = result.next_begin_offset
                continue
            for buf in result.buffers:
                yield from decode_records(buf)
            offset = result.next_begin_offset

    # --- the send path ----------------------------------------------------------------------------

    def half(self, topic: str, queue_id: int, props: bytes) -> bytes:
        """Properties of the half message that stands in for a transactional send to topic/queue."""
        self._ensure_topics()
        if props and not props.endswith(b"\x02"):
            props += b"\x02"
        uniq = (find_property(props, b"UNIQ_KEY\x01") or b"").decode(errors="replace")
        extra = {Prop.REAL_TOPIC: topic, Prop.REAL_QID: str(queue_id), Prop.TRANSACTION_ID: uniq}
        return props + encode_properties(extra).encode()

    def _ensure_topics(self) -> None:
        created = False
        for topic in (HALF_TOPIC, OP_TOPIC, CHECK_MAX_TIME_TOPIC):
            created |= self.topics.ensure(topic, 1)
        if created:
            self._topics_changed()

    # --- END_TRANSACTION --------------------------------------------------------------------------

    async def end(self, group: str, commit_log_offset: int, queue_offset: int, state: int) -> str:
        """Commit (8) or roll back (12) the half message; the answer says what happened. A commit
        waits for its intent outside the lock (one replication round trip), marked as being ended."""
        async with self._deciding:
            msg, origin = self._to_end(group, commit_log_offset, queue_offset)
            if origin is None:
                return "already ended"
            if state != TRANSACTION_COMMIT_TYPE:
                self._count(state)
                await self._mark_ended(origin)
                return "rolled back"
            self._ending[origin] = self._op_max()
        try:
            intent = PutCommand(OP_TOPIC, 0, str(origin).encode(), _INTENT_PROPS, born_timestamp=_now_ms())
            if not await self._intend(intent, "transaction commit"):
                raise EndError("the intent to commit was not stored")
            async with self._deciding:
                if self._ended(origin):  # discarded by the check meanwhile
                    return "already ended"
                await self._commit(msg)
                self._count(state)
                await self._mark_ended(origin)
                # The intent is the mark: the op cursor must not pass it while the half cursor has not
                # passed this transaction, or an acting slave would never see the intent.
                self.ended[origin] = min(self.ended[origin], self._ending[origin])
        finally:
            del self._ending[origin]
        return "committed"

    def _to_end(self, group: str, commit_log_offset: int, queue_offset: int) -> tuple[MessageExt, int | None]:
        """The half message an END_TRANSACTION names, and its origin (None: already ended)."""
        record = self.store.look_message_by_offset(commit_log_offset) if commit_log_offset >= 0 else None
        msg = decode_record(record) if record is not None else None
        if msg is None or msg.topic != HALF_TOPIC or msg.queue_offset != queue_offset:
            raise EndError(
                f"no half message at commitlog offset {commit_log_offset}, queue offset {queue_offset}"
            )
        if msg.properties.get(Prop.PGROUP) != group:
            raise EndError(f"the half message belongs to producer group {msg.properties.get(Prop.PGROUP)!r}")
        origin = _origin(msg)
        return msg, None if self._ended(origin) or origin in self._ending else origin

    def _ended(self, origin: int) -> bool:
        return (
            origin in self.ended
            or origin in self.acting_ended
            or (origin < self.half_cursor and not self.copies_ahead.get(origin))
        )

    def _count(self, state: int) -> None:
        self.counts["committed" if state == TRANSACTION_COMMIT_TYPE else "rolledBack"] += 1

    async def end_escaped(
        self, put: Callable[..., Awaitable[PutResult]], group: str, commit_log_offset: int, queue_offset: int,
        state: int,
    ) -> str:  # fmt: skip
        """`end` on a slave acting for its master: a commit goes to another master by `put` (the escape
        bridge's, which applies any delay there); the origin is remembered for the master."""
        msg, origin = self._to_end(group, commit_log_offset, queue_offset)
        if origin is None:
            return "already ended"
        if self._leaves_to_master(origin):
            raise EndError("the master may have committed it: left to the master for now")
        if state == TRANSACTION_COMMIT_TYPE:
            topic, queue_id, props, sys_flag = _committed(msg)
            result = await put(topic, queue_id, msg.body, props, msg.flag, sys_flag, msg.born_timestamp,
                               msg.reconsume_times)  # fmt: skip
            if result.status is not PutStatus.PUT_OK:
                raise EndError(f"cannot escape the commit: {result.remark or result.status.name}")
        self._count(state)
        self.acting_ended.add(origin)
        save_json(self._acting_path, ActingEnded(sorted(self.acting_ended)))
        return "committed" if state == TRANSACTION_COMMIT_TYPE else "rolled back"

    def forget_ended(self, origins: list[int]) -> None:
        """The master confirmed it has these handed back (its op records are on disk): forget them."""
        self.acting_ended.difference_update(origins)
        save_json(self._acting_path, ActingEnded(sorted(self.acting_ended)))

    async def reclaim(self, ended: list[int]) -> None:
        """The master back: write op records for the transactions its acting slave ended."""
        async with self._deciding:
            for origin in ended:
                if origin not in self.ended:
                    await self._mark_ended(origin)

    async def _commit(self, half: MessageExt) -> None:
        topic, queue_id, props, sys_flag = _committed(half)
        encoded = encode_properties(props).encode()
        try:  # a committed message with a delay or delivery time is held back like any other
            diverted = self._divert(encoded, topic, queue_id, sys_flag)
        except ScheduleError as e:
            raise EndError(str(e)) from None
        if diverted is not None:
            topic, queue_id, encoded = diverted
        await self._put(
            half,
            topic,
            queue_id,
            encoded,
            sys_flag=sys_flag,
            prepared_transaction_offset=half.commitlog_offset,
        )

    async def _mark_ended(self, origin: int) -> None:
        op = PutCommand(OP_TOPIC, 0, str(origin).encode(), _OP_PROPS, born_timestamp=_now_ms())
        result = self._written(await self._store_put(op), OP_TOPIC)
        self.ended[origin] = result.queue_offset

    async def _put(
        self, msg: MessageExt, topic: str, queue_id: int, props: dict | bytes, *, sys_flag: int | None = None,
        prepared_transaction_offset: int = 0,
    ) -> PutResult:  # fmt: skip
        """Write `msg` with `props` (a dict, or already encoded) to topic/queue."""
        encoded = props if isinstance(props, bytes) else encode_properties(props).encode()
        result = await self._store_put(
            PutCommand(
                topic,
                queue_id,
                msg.body,
                encoded,
                msg.flag,
                msg.sys_flag if sys_flag is None else sys_flag,
                msg.born_timestamp,
                _packed_host(msg.born_host),
                msg.reconsume_times,
                prepared_transaction_offset=prepared_transaction_offset,
            )
        )
        return self._written(result, topic)

    def _written(self, result: PutResult, topic: str) -> PutResult:
        if result.status is not PutStatus.PUT_OK:
            raise EndError(f"cannot write to {topic}: {result.remark or result.status.name}")
        self._after_put()
        return result

    # --- the check-back service -------------------------------------------------------------------

    async def check(self) -> None:
        """One pass over the half queue: skip ended, check timed-out, discard over-checked ones."""
        async with self._deciding:
            checks = await self._scan(_now_ms())
        self.offsets.commit(CHECK_GROUP, HALF_TOPIC, 0, self.half_cursor)
        marks = [*self.ended.values(), *self._ending.values()]  # intents of commits under way stay ahead
        self.offsets.commit(CHECK_GROUP, OP_TOPIC, 0, min(marks, default=self._op_max()))
        for copy in checks:
            await self._ask_producer(copy)

    def _op_max(self) -> int:
        return self.store.get_max_offset(OP_TOPIC, 0)

    async def _scan(self, now: int) -> list[MessageExt]:
        checks = []
        end = self.store.get_max_offset(HALF_TOPIC, 0)  # copies made now land past it: next pass
        for msg in self._read(HALF_TOPIC, self.half_cursor, end):
            offset, origin = msg.queue_offset, _origin(msg)
            if origin in self.ended:
                self._passed(offset, origin)
                continue
            props = msg.properties
            immunity = _int(props.get(CHECK_IMMUNITY), 0) * 1000 or self.timeout_ms
            if (
                now - min(msg.born_timestamp, msg.store_timestamp) < immunity
            ):  # a producer's clock may run ahead
                break  # later half messages are younger still
            times = _int(props.get(Prop.TRANSACTION_CHECK_TIMES), 0)
            if times >= self.check_max:
                await self._put(msg, CHECK_MAX_TIME_TOPIC, 0, props)
                await self._mark_ended(origin)
                log.warning("transaction %s unresolved after %d checks: moved to %s",
                            props.get(Prop.UNIQ_KEY), times, CHECK_MAX_TIME_TOPIC)  # fmt: skip
            else:
                copy_props = {**props, Prop.TRANSACTION_CHECK_TIMES: str(times + 1), ORIGIN: str(origin)}
                result = await self._put(msg, HALF_TOPIC, 0, copy_props)
                self.copies_ahead[origin] = self.copies_ahead.get(origin, 0) + 1
                msg.properties = copy_props
                msg.commitlog_offset, msg.queue_offset = result.wrote_offset, result.queue_offset
                msg.store_timestamp = result.store_timestamp
                checks.append(msg)
            self._passed(offset, origin)
        self._prune()
        return checks

    def _passed(self, offset: int, origin: int) -> None:
        """The cursor moves past the half message at `offset`, of transaction `origin`."""
        self.half_cursor = offset + 1
        if offset != origin:  # a copy
            left = self.copies_ahead.get(origin, 0) - 1
            if left > 0:
                self.copies_ahead[origin] = left
            else:
                self.copies_ahead.pop(origin, None)

    def _prune(self) -> None:
        """Forget ended origins the checker will never meet again (no copy of them is left ahead)."""
        cursor, ahead = self.half_cursor, self.copies_ahead
        self.ended = {o: op for o, op in self.ended.items() if o >= cursor or o in ahead}

    async def check_as_acting_master(self) -> None:
        """One pass on a slave acting for its master: ask producers about the half messages due a
        check, writing nothing (the log is the master's copy; the answers are escaped)."""
        now = time.time_ns() // 1_000_000
        asked: set[int] = set()
        for msg in self._read(HALF_TOPIC, self.half_cursor, self.store.get_max_offset(HALF_TOPIC, 0)):
            origin = _origin(msg)
            if origin in self.ended or origin in self.acting_ended or origin in asked:
                continue
            if self._leaves_to_master(origin):
                continue
            props = msg.properties
            immunity = _int(props.get(CHECK_IMMUNITY), 0) * 1000 or self.timeout_ms
            if now - min(msg.born_timestamp, msg.store_timestamp) < immunity:
                break
            times = _int(props.get(Prop.TRANSACTION_CHECK_TIMES), 0) + self._acting_checks.get(origin, 0)
            if times >= self.check_max:
                continue  # the master discards it once back
            asked.add(origin)
            self._acting_checks[origin] = self._acting_checks.get(origin, 0) + 1
            await self._ask_producer(msg)

    def _leaves_to_master(self, origin: int) -> bool:
        """Whether an acting slave leaves the transaction to its master (it may have committed it)."""
        if origin not in self.undecided:
            return False
        if time.monotonic() < self._undecided_until:
            return True
        log.warning("transaction %d: the master may have committed it and is still away after %.0f s: "
                    "asking the producer (at least once)", origin, self.undecided_timeout)  # fmt: skip
        self.undecided.discard(origin)
        return False

    async def _ask_producer(self, msg: MessageExt) -> None:
        group = msg.properties.get(Prop.PGROUP, "")
        members = list(self.clients.producers.get(group, {}).values())
        if not members:
            log.info(
                "no producer of group %s online to check transaction %s",
                group,
                msg.properties.get(Prop.UNIQ_KEY),
            )
            return
        store_host = self.store.store_host
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=msg.queue_offset, commit_log_offset=msg.commitlog_offset,
            topic=msg.properties.get(Prop.REAL_TOPIC), msg_id=msg.properties.get(Prop.UNIQ_KEY),
            transaction_id=msg.properties.get(Prop.TRANSACTION_ID),
            offset_msg_id=offset_msg_id(store_host, msg.commitlog_offset),
        )  # fmt: skip
        msg.topic = msg.properties.get(Prop.REAL_TOPIC, msg.topic)
        msg.queue_id = _int(msg.properties.get(Prop.REAL_QID), 0)
        request = RemotingCommand(
            RequestCode.CHECK_TRANSACTION_STATE, ext_fields=header.to_ext_fields(), body=msg.encode()
        )
        member = members[self.counts["checked"] % len(members)]
        self.counts["checked"] += 1
        try:
            await member.connection.send_oneway(request)
        except RemotingError as e:
            log.warning("cannot ask %s to check a transaction: %s", member.client_id, e)

    def stats(self) -> dict[str, str]:
        """For GET_BROKER_RUNTIME_INFO: what the transaction service did since start."""
        return {
            "transactionCommitted": str(self.counts["committed"]),
            "transactionRolledBack": str(self.counts["rolledBack"]),
            "transactionChecks": str(self.counts["checked"]),
            "transactionHalfPending": str(self.store.get_max_offset(HALF_TOPIC, 0) - self.half_cursor),
            "transactionDiscarded": str(self.store.get_max_offset(CHECK_MAX_TIME_TOPIC, 0)),
        }


async def _no_intent(command: PutCommand, what: str) -> bool:
    return True


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@functools.lru_cache(maxsize=4096)
def _packed_host(host: tuple[str, int]) -> bytes:
    """The record form of a producer's address (few producers, many transactions: cached)."""
    return pack_host(*host)


def _origin(msg: MessageExt) -> int:
    return _int(msg.properties.get(ORIGIN), msg.queue_offset)


def _op_origins(body: bytes) -> list[int]:
    return [int(p) for p in body.split(b",") if p.strip().isdigit()]


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default


def _committed(half: MessageExt) -> tuple[str, int, dict[str, str], int]:
    """(topic, queue id, properties, sys flag) of the message a commit of `half` stores."""
    props = dict(half.properties)
    topic = props.pop(Prop.REAL_TOPIC, None)
    queue_id = int(props.pop(Prop.REAL_QID, "0") or 0)
    props.pop(Prop.TRAN_MSG, None)
    if not topic:
        raise EndError("the half message has no REAL_TOPIC")
    return topic, queue_id, props, (half.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE
