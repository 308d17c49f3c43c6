"""Scheduled messages: delay levels (SCHEDULE_TOPIC_XXXX) and arbitrary delivery times (the timer).

A scheduled message is stored under a system topic with its real destination in REAL_TOPIC /
REAL_QID (`divert`), kept there until due, then stored again under its real topic (`redeliver`).
`DelayLevelService` serves the delay levels, `TimerService` the 5.x delivery-time properties.
"""

from ferrymq.broker.schedule.delay import DelayLevelService
from ferrymq.broker.schedule.divert import TIMER_TOPIC, ScheduleError, divert
from ferrymq.broker.schedule.timer import TimerService

__all__ = ["TIMER_TOPIC", "DelayLevelService", "ScheduleError", "TimerService", "divert"]
