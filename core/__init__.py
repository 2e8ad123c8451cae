"""tidemq's core, under every other package: the error root, declared settings and their bounds,
the ServiceThread base of every background thread, and the clock.

Other packages import these names from `core`; it imports nothing of tidemq's."""

from core.clock import SYSTEM_CLOCK, Clock, FakeClock, SystemClock
from core.errors import ConfigInvalid, TidemqError
from core.service_thread import ServiceThread
from core.setting import BOUNDS_KEY, Bounds, bounds_of, check_fields, declared_settings, setting

__all__ = [
    "BOUNDS_KEY",
    "SYSTEM_CLOCK",
    "Bounds",
    "Clock",
    "ConfigInvalid",
    "FakeClock",
    "ServiceThread",
    "SystemClock",
    "TidemqError",
    "bounds_of",
    "check_fields",
    "declared_settings",
    "setting",
]
