"""Runs the driver's child processes side by side on one GPU without letting
them fill it: each job says how many bytes of device memory it may take
(its memory limit, plus a CUDA context), and a job starts only while the
running jobs' bytes and count stay within the pool's budget. Waiting jobs
start in priority order (lower first, then submission order); a job that
does not fit lets a smaller one behind it start, and a job larger than the
whole budget runs alone.

Each job is one subprocess with a timeout; its result is the child's last
JSON line, or an "error" outcome saying what went wrong (exit status,
timeout, unreadable output). After `deadline` (time.monotonic()), jobs not
yet started are not started: they end as "skipped".
"""
from __future__ import annotations

import concurrent.futures as cf
import itertools
import json
import subprocess
import threading
import time
from typing import List, Optional


def run_child(cmd: List[str], timeout: float, env=None) -> dict:
    """Runs one child; its last stdout line parsed as JSON, or an error."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        tail = (e.stderr or b"")[-1500:]
        return {"outcome": "error", "message": f"timed out after {timeout:.0f} s",
                "stderr": tail.decode(errors="replace") if isinstance(tail, bytes) else tail,
                "seconds": time.monotonic() - t0}
    lines = p.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        out = None
    if not isinstance(out, dict):
        return {"outcome": "error", "message": f"exit status {p.returncode}, no result line",
                "stderr": p.stderr[-1500:], "seconds": time.monotonic() - t0}
    if p.returncode != 0 and out.get("outcome") == "ok":
        out.update(outcome="error", message=f"exit status {p.returncode}")
    if out.get("outcome") == "error":
        out.setdefault("stderr", p.stderr[-1500:])
    return out


class Pool:
    def __init__(self, mem_budget: int, max_jobs: int, deadline: Optional[float] = None):
        self.mem_budget, self.max_jobs, self.deadline = mem_budget, max(1, max_jobs), deadline
        self._lock = threading.Condition()
        self._queue: list = []  # (priority, seq, mem, cmd, timeout, future)
        self._seq = itertools.count()
        self._running = 0
        self._mem_used = 0
        self._closed = False
        self._threads = cf.ThreadPoolExecutor(max_workers=self.max_jobs, thread_name_prefix="job")
        self._dispatcher = threading.Thread(target=self._dispatch, daemon=True)
        self._dispatcher.start()
        self.started = 0

    def submit(self, cmd: List[str], mem: int, timeout: float, priority: int = 0) -> cf.Future:
        fut: cf.Future = cf.Future()
        with self._lock:
            self._queue.append((priority, next(self._seq), mem, cmd, timeout, fut))
            self._lock.notify_all()
        return fut

    def run_many(self, cmds: List[List[str]], mem: int, timeout: float, priority: int = 0) -> list:
        futs = [self.submit(c, mem, timeout, priority) for c in cmds]
        return [f.result() for f in futs]

    def _pick(self):
        """The first queued job (priority order) that fits now, or None."""
        for item in sorted(self._queue, key=lambda it: it[:2]):
            mem = item[2]
            if self._running == 0 or (self._running < self.max_jobs
                                      and self._mem_used + mem <= self.mem_budget):
                self._queue.remove(item)
                return item
        return None

    def _dispatch(self):
        while True:
            with self._lock:
                while True:
                    if self._closed and not self._queue:
                        return
                    if self.deadline is not None and time.monotonic() > self.deadline:
                        for *_, fut in self._queue:
                            fut.set_result({"outcome": "skipped", "message": "out of time"})
                        self._queue.clear()
                    item = self._pick() if self._queue else None
                    if item is not None:
                        break
                    self._lock.wait(timeout=1.0)
                _, _, mem, cmd, timeout, fut = item
                self._running += 1
                self._mem_used += mem
                self.started += 1
            self._threads.submit(self._run, mem, cmd, timeout, fut)

    def _run(self, mem, cmd, timeout, fut):
        try:
            if self.deadline is not None:
                timeout = max(5.0, min(timeout, self.deadline - time.monotonic() + 30))
            out = run_child(cmd, timeout)
        except Exception as e:  # noqa: BLE001 - a job's failure is its result
            out = {"outcome": "error", "message": f"{type(e).__name__}: {e}"}
        finally:
            with self._lock:
                self._running -= 1
                self._mem_used -= mem
                self._lock.notify_all()
        fut.set_result(out)

    def close(self):
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._dispatcher.join()
        self._threads.shutdown(wait=True)
