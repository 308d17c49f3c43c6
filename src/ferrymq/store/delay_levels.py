"""RocketMQ's delay levels: `message_delay_level` such as "1s 5s 10s 30s 1m ... 2h" → milliseconds."""

from __future__ import annotations

_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """The delay of each level in ms (level n is item n-1); ValueError naming the bad part."""
    levels = []
    for part in text.split():
        unit = _UNIT_MS.get(part[-1:].lower())
        number = part[:-1]
        if unit is None or not number.isdigit() or int(number) <= 0:
            raise ValueError(
                f"message_delay_level: {part!r} is not a delay like 5s, 10m, 2h or 1d (in {text!r})"
            )
        levels.append(int(number) * unit)
    if not levels:
        raise ValueError('message_delay_level needs at least one level, e.g. "1s 5s 10s"')
    return levels
