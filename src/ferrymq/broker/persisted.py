"""Load and save a broker's JSON config files (topics.json, consumerOffset.json, ...) durably."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TypeVar

from ferrymq.protocol.bodies import Body, DataVersion, decode_body, encode_body
from ferrymq.protocol.remoting import RemotingProtocolError
from ferrymq.store.files import atomic_write, durable_copies

log = logging.getLogger(__name__)
B = TypeVar("B", bound=Body)


def load_json(path: Path, cls: type[B]) -> B:
    """The file's content, its .bak if the main copy is damaged, or a fresh default."""
    for candidate, data in durable_copies(path):
        try:
            return decode_body(cls, data)
        except RemotingProtocolError as e:
            log.error("%s is damaged (%s); trying its backup", candidate, e)
    return cls()


def save_json(path: Path, body: Body) -> None:
    atomic_write(path, encode_body(body))


def next_version(version: DataVersion) -> DataVersion:
    """RocketMQ's DataVersion.nextVersion: a new timestamp and a bumped counter."""
    return DataVersion(
        state_version=version.state_version, timestamp=int(time.time() * 1000), counter=version.counter + 1
    )
