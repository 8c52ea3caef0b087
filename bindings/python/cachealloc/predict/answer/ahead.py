"""A size search's second worker: it records the size the search will
most likely ask for next while the first records the size asked for
(largest.py). Used only when asked for, so the answer is the sequential
search's; see Ahead."""
from __future__ import annotations

import time
from typing import Callable, Optional

from .record import Session, not_seen


class Ahead:
    """Two worker processes: while one records the size the search asked
    for, the other records the size it will most likely ask for next (a
    hint: twice the size while doubling, the next size up while
    bisecting). On two cores the two run at once; a search spends most of
    its time in recordings, one after another.

    The search itself is unchanged: it asks for the sizes it asks for, in
    the same order, and a size recorded ahead is used only when asked for,
    so the answer is the sequential search's. A guess that was not asked
    for next is dropped with its worker (killed; a fresh one starts,
    importing torch on the other core). A recording ahead that failed or
    saw no step is not used: the size is recorded again, as the search
    would have. affordable() says when to stop recording ahead: two
    recordings at once must fit the host's memory, and the recording must
    not have fallen back to all-fake (each worker decides that alone)."""

    def __init__(self, main: Session, new_session: Callable[[], Session]):
        self.main = main            # free between record() calls
        self.new_session = new_session
        self.spare = new_session()  # records self.size ahead, when not None
        self.size = None

    @staticmethod
    def affordable(summary: dict) -> bool:
        """Two recordings of this size at once fit the host: the real CPU
        side's peak, thrice, within one worker's budget (cpu-init mode)."""
        if summary.get("mode") != "cpu-init" or summary.get("mode_note"):
            return False
        peak, budget = summary.get("host_bytes_peak"), summary.get("host_budget")
        return peak is not None and budget is not None and 3 * peak <= budget

    def record(self, size: int, hint: Optional[int], timeout):
        """size's recording (Recorded): the one made ahead when it is that
        size, else made now; hint goes ahead meanwhile."""
        deadline = None if timeout is None else time.time() + timeout
        if self.size == size:
            self.size = None
            self.main, self.spare = self.spare, self.main     # the free one goes ahead
            self._start(hint, timeout, deadline)
            try:
                rec, log_tail = self.main.wait()
            except Exception:       # recorded again below, as the search would have
                self.main.close()
                self.main = self.new_session()
            else:
                if not_seen(rec.summary, self.main.no_optimizer_step) is None:
                    return rec
        elif self.size is not None:  # a wrong guess
            self._renew()
        self.main.start(size, timeout, deadline)
        self._start(hint, timeout, deadline)
        rec, log_tail = self.main.wait()
        return self.main.seen(rec, log_tail, size, timeout, deadline)

    def _start(self, hint, timeout, deadline) -> None:
        if hint is None or self.size is not None:
            return
        try:
            self.spare.start(hint, timeout, deadline)
            self.size = hint
        except Exception:            # out of time, or the worker is gone: nothing ahead
            self._renew()

    def _renew(self) -> None:
        self.spare.close()
        self.size = None
        self.spare = self.new_session()

    def close_spare(self) -> Session:
        """Stops recording ahead; the worker left (the search's from now on)."""
        self.spare.close()
        self.size = None
        return self.main

    def close(self) -> None:
        self.spare.close()
        self.main.close()
