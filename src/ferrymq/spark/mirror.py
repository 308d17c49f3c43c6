"""Mirror a streaming query's checkpointed offsets to a consumer group, so that `ferrymq` admin
tools (and RocketMQ's) show the query's lag like any consumer's.

Spark's checkpoint stays the source of truth. The source's `commit()` cannot do this: Spark calls
it lazily, while planning the next batch, and never for the last batch of an availableNow run.
A StreamingQueryListener hears of every batch once it is committed, with its end offsets.
"""

from __future__ import annotations

import json
import logging

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from ferrymq.client.instance import ClientInstance
from ferrymq.client.pull import commit_offset, master_addr
from ferrymq.spark.cluster import Blocking, parse_queue

log = logging.getLogger(__name__)


def parse_source_offsets(text: str | None) -> dict[str, dict[str, int]] | None:
    """A ferrymq source's offsets from a progress report, or None for any other source's."""
    try:
        offsets = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(offsets, dict) or not offsets:
        return None
    for queues in offsets.values():
        if not isinstance(queues, dict) or not all(
            ":" in k and isinstance(v, int) for k, v in queues.items()
        ):
            return None
    return offsets


async def commit_offsets(instance: ClientInstance, group: str, offsets: dict[str, dict[str, int]]) -> None:
    for topic, queues in offsets.items():
        for key, offset in queues.items():
            mq = parse_queue(topic, key)
            await commit_offset(instance, await master_addr(instance, mq), mq, group, offset)


class OffsetMirror(StreamingQueryListener):
    """After each batch of the query named `query_name` (or of every query), commit its ferrymq
    end offsets as `group`'s consumer offsets."""

    def __init__(self, namesrv: str, group: str, query_name: str | None = None) -> None:
        self.namesrv = namesrv
        self.group = group
        self.query_name = query_name
        self._cluster: Blocking | None = None

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        if self.query_name is not None and progress.name != self.query_name:
            return
        self._commit(progress)

    def commit_last(self, query) -> None:
        """Commit `query`'s last progress now. Listeners hear of batches asynchronously: a job that
        ends (an availableNow run) calls this after awaitTermination so its last batch is mirrored."""
        if query.lastProgress is not None:
            self._commit(query.lastProgress)

    def _commit(self, progress) -> None:
        for source in progress.sources:
            offsets = parse_source_offsets(source.endOffset)
            if offsets is None:
                continue
            try:
                if self._cluster is None:
                    self._cluster = Blocking(self.namesrv)
                self._cluster.run(commit_offsets, self.group, offsets)
            except Exception:  # a listener must not break the query; the next batch tries again
                log.exception("mirroring offsets to group %s failed", self.group)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


def mirror_offsets(
    spark: SparkSession, namesrv: str, group: str, query_name: str | None = None
) -> OffsetMirror:
    """Register an OffsetMirror on `spark`; remove it with `spark.streams.removeListener(mirror)`."""
    mirror = OffsetMirror(namesrv, group, query_name)
    spark.streams.addListener(mirror)
    return mirror
