"""Background memory monitoring: a thread samples the device's memory
every interval and calls back when allocated or reserved bytes cross a
threshold.

Alerts are edge-triggered: one alert when a value goes above its threshold
(or already is above it when monitoring starts), and none again until it has
come back to or below the threshold. Units: bytes, seconds.
"""
from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, Dict, List, Optional

# A sample joins the profiler's timeline only if reading it took at most this
# long (seconds), so its timestamp is that exact.
TIMELINE_MAX_SKEW_S = 0.0005


@dataclass
class MemorySample:
    timestamp: float  # seconds since the Unix epoch
    allocated: int    # bytes
    reserved: int     # bytes


@dataclass
class MemoryAlert:
    kind: str         # "allocated" or "reserved"
    value: int        # bytes at the sample that crossed
    threshold: int    # bytes
    device: int
    timestamp: float  # seconds since the Unix epoch


def _default_callback(alert: MemoryAlert) -> None:
    warnings.warn(f"cachealloc.profiler: device {alert.device} {alert.kind} memory "
                  f"{alert.value} B crossed the threshold of {alert.threshold} B",
                  RuntimeWarning, stacklevel=2)


def _check_threshold(name: str, value: Optional[int]) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be None or a number of bytes >= 0, got {value!r}")
    return value


class MemoryMonitor:
    """Samples `read_bytes()` (a dict with "allocated" and "reserved"
    bytes, as a scope source's current_bytes()) every `interval_s` on a
    daemon thread, keeps the last `max_samples` samples (passing those timed
    within TIMELINE_MAX_SKEW_S to `on_sample`), and calls
    `callback(MemoryAlert)` on threshold crossings (default: a
    RuntimeWarning). An exception in the callback is kept in `errors` and
    reported as a warning; sampling goes on."""

    def __init__(self, read_bytes: Callable[[], Dict[str, int]], device: int,
                 interval_s: float = 0.1, allocated_threshold: Optional[int] = None,
                 reserved_threshold: Optional[int] = None,
                 callback: Optional[Callable[[MemoryAlert], None]] = None,
                 max_samples: int = 100_000,
                 on_sample: Optional[Callable[[MemorySample], None]] = None):
        if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or not interval_s > 0:
            raise ValueError(f"interval_s must be a number of seconds > 0, got {interval_s!r}")
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        self._thresholds = {
            "allocated": _check_threshold("allocated_threshold", allocated_threshold),
            "reserved": _check_threshold("reserved_threshold", reserved_threshold),
        }
        self._read_bytes = read_bytes
        self.device = device
        self.interval_s = float(interval_s)
        self._callback = callback or _default_callback
        self._on_sample = on_sample
        self.samples: Deque[MemorySample] = deque(maxlen=max_samples)
        self.alerts: List[MemoryAlert] = []
        self.errors: List[BaseException] = []
        self._above = {"allocated": False, "reserved": False}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            raise RuntimeError("monitoring is already running; stop it first")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cachealloc-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops the thread and waits for it (a sample in progress finishes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def sample_once(self) -> MemorySample:
        """Takes one sample and fires alerts, on the calling thread."""
        start = time.time()
        now = self._read_bytes()
        took = time.time() - start
        s = MemorySample(start, now["allocated"], now["reserved"])
        self.samples.append(s)
        # The read happened somewhere in [start, start + took]; when the
        # thread had to wait for the GIL that window is long and the sample
        # could land out of order on the timeline, so only tight ones go there.
        if self._on_sample is not None and took <= TIMELINE_MAX_SKEW_S:
            self._on_sample(s)
        for kind, value in (("allocated", s.allocated), ("reserved", s.reserved)):
            threshold = self._thresholds[kind]
            if threshold is None:
                continue
            above = value > threshold
            if above and not self._above[kind]:
                alert = MemoryAlert(kind, value, threshold, self.device, s.timestamp)
                self.alerts.append(alert)
                try:
                    self._callback(alert)
                except Exception as e:  # a broken callback must not stop monitoring
                    self.errors.append(e)
                    warnings.warn(f"cachealloc.profiler: monitoring callback raised {e!r}",
                                  RuntimeWarning)
            self._above[kind] = above
        return s

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as e:  # e.g. the allocator was re-initialized
                self.errors.append(e)
            self._stop.wait(self.interval_s)
