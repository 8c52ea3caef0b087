"""The wall-clock budget of one prediction (`--timeout`, the API's
`timeout=`): the whole of fits() or largest(), every recording and replay.
A recording gets what is left (its worker's watchdog ends it there, naming
the step's line: device/watchdog.py); a phase that starts with nothing left
ends the prediction with failure kind "timeout".

DEFAULT_TIMEOUT, 600 s: about 60 times the 10 s a size should take, and ten
times a largest-batch search's 60 s target (docs/prediction.md), so that
only a step that does not end (or a machine far slower than a laptop) gets
there. None or 0: no limit.
"""
from __future__ import annotations

import time
from typing import Optional

from .record import out_of_time

DEFAULT_TIMEOUT = 600.0


class Budget:
    def __init__(self, seconds: Optional[float] = DEFAULT_TIMEOUT):
        if seconds is not None and seconds < 0:
            raise ValueError(f"timeout must be positive seconds (0 or None: no limit), got {seconds}")
        self.seconds = seconds or None
        self._end = None if self.seconds is None else time.monotonic() + self.seconds

    def left(self) -> Optional[float]:
        """Seconds left (None: no limit); may be <= 0."""
        return None if self._end is None else self._end - time.monotonic()

    def check(self, phase: str) -> None:
        """Raises PredictionRefused (kind "timeout") if nothing is left."""
        left = self.left()
        if left is not None and left <= 0:
            raise out_of_time(self.seconds, phase)
