"""The OOM flight recorder: at an out-of-memory error, the snapshot, the
reason and the fix, at the moment it happens.

Opt-in, by any of cachealloc.install(oom_snapshot=DIR), `cachealloc run
--oom-snapshot DIR` or CACHEALLOC_OOM_SNAPSHOT=DIR (never a
PYTORCH_CUDA_ALLOC_CONF key: that text stays what native accepts). Then at
each OOM:

- the snapshot (segments, blocks and the recorded requests, with the
  failure's facts under "cachealloc_oom") is written into DIR atomically
  (a temporary file renamed into place), one file per OOM named by rank and
  time (rank_files.py); a process keeps its newest KEEP files (default 8)
  and deletes its oldest first;
- native's message is followed by the diagnosis (lab/oom_diagnosis.h): what
  was reserved but unallocated, the largest free block, the request as the
  allocator rounded it, the segments live blocks split and pin and the
  sites pinning the most, and what a what-if replay of the recorded
  requests (bounded to 500 ms, in this process; budget_ms or
  $CACHEALLOC_OOM_BUDGET_MS) says would have avoided it.
  Cost at the OOM: benchmarks/oom_recorder_cost.py.

What the what-if replays needs no preparation: while the recorder is on,
every device keeps its request stream (allocations and frees with sizes,
streams and order, segment events, OOMs; no frames, no time) in a ring of
RING_MB MiB of host memory, allocated when the recorder starts (32 bytes a
record: one allocation, or one free; 4 MiB is 131,072 records, where the
BERT step of issue 46 made 4,301 requests before its OOM). When the ring
is full each new record overwrites the oldest; once it has, the what-if
starts from the live state at the oldest record kept (the blocks live
then, allocated first in address order), says so, and suggests nothing
when that replay does not reproduce the OOM. Its cost: 56 instructions per
cache-hit pair (stats/request_ring.h; docs/benchmarks.md). The ring lies
apart from PyTorch's history (torch.cuda.memory._record_memory_history):
what the program's own _snapshot() returns stays native's, with no trace
entry unless the program turned history on. Only the snapshot file written
at the OOM carries the ring, as its device_traces, on each device where it
holds more requests than the history does (a history that reaches as far
back is kept, frames and all); "cachealloc_request_ring" says which. The
ring's size: ring_mb, or $CACHEALLOC_OOM_RING_MB. The allocator stays
usable after the OOM.

Under the PyTorch glue the recorder is an OOM observer (called on the
failing thread, without allocator locks, before the error is raised); it
leaves its text as that thread's note, which the glue appends to native's
message. Under cachealloc's own API (raw._malloc) it is called from there.
"""
from __future__ import annotations

import collections
import ctypes
import os
import pickle
import tempfile
import threading
from typing import Optional

from . import plain_pickle
from ._native import OomInfoStruct, check, lib
from .history import snapshot
from .library_frames import with_prefixes
from .rank_files import rank_file_name

ENV = "CACHEALLOC_OOM_SNAPSHOT"
RING_ENV = "CACHEALLOC_OOM_RING_MB"
BUDGET_ENV = "CACHEALLOC_OOM_BUDGET_MS"
DEFAULT_KEEP = 8
BUDGET_MS = 500
# Host memory of each device's request ring, MiB (see above): 131,072
# records of 32 bytes.
RING_MB = 4
RING_MB_MAX = 16384  # a typo must not reserve the host's memory
# The snapshot key that says where each device's device_traces came from.
RING_KEY = "cachealloc_request_ring"
# The trace actions a replay is made of; the ring wins a device whose
# history holds fewer of them.
_REQUEST_ACTIONS = ("alloc", "free_requested", "free_completed")

_recorder: Optional["FlightRecorder"] = None


class FlightRecorder:
    """Writes one snapshot per OOM into `directory` and diagnoses it."""

    def __init__(self, directory: str, keep: int = DEFAULT_KEEP, budget_ms: Optional[int] = None,
                 ring_mb: Optional[float] = None):
        if not isinstance(directory, str) or not directory:
            raise ValueError(f"oom_snapshot must be a directory path, got {directory!r}")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an int >= 1, got {keep!r}")
        self.ring_bytes = ring_bytes(ring_mb)
        self.budget_ms = budget(budget_ms)
        os.makedirs(directory, exist_ok=True)
        if not os.access(directory, os.W_OK):
            raise PermissionError(f"oom_snapshot directory {directory!r} is not writable")
        self.directory = directory
        self.keep = keep
        self._written: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self.last_path: Optional[str] = None
        self.last_text: Optional[str] = None

    def write(self, data: bytes) -> str:
        """Writes `data` as the next snapshot file, atomically: readers see
        the whole file or none. Deletes this process's oldest files beyond
        `keep`. Returns the path."""
        name = rank_file_name("oom", ".pickle")
        path = os.path.join(self.directory, name)
        fd, tmp = tempfile.mkstemp(prefix="." + name, suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        with self._lock:
            self._written.append(path)
            while len(self._written) > self.keep:
                old = self._written.popleft()
                try:
                    os.unlink(old)
                except FileNotFoundError:
                    pass
        return path

    def record(self) -> str:
        """At an OOM, on the thread that ran out of memory: snapshot, file,
        diagnosis. Returns the text to follow native's message; never
        raises (a failure is reported in the text)."""
        try:
            snap = with_prefixes(_snapshot_dict())
            with_request_ring(snap, request_rings())
            info = OomInfoStruct()
            if lib().cachealloc_last_oom(ctypes.addressof(info)) == 0:
                snap["cachealloc_oom"] = {
                    "device": info.device, "requested": info.requested, "rounded": info.rounded,
                    "allocation": info.allocation, "device_total": info.device_total,
                    "device_free": info.device_free,
                    "allowed": info.allowed if info.limit_set else None,
                    "allocated": info.allocated, "reserved": info.reserved,
                    "message": lib().cachealloc_last_error().decode(errors="replace"),
                }
            data = pickle.dumps(snap, protocol=4)
            path = self.write(data)
            text = diagnose(data, path, budget_ms=self.budget_ms).rstrip("\n")
        except Exception as e:  # the OOM must still be raised, with native's text
            text = f"cachealloc flight recorder: no diagnosis ({type(e).__name__}: {e})"
            path = None
        self.last_path, self.last_text = path, text
        return text


def diagnose(data: bytes, path: Optional[str] = None, memory_limit: Optional[int] = None,
             budget_ms: Optional[int] = None) -> str:
    """The diagnosis text of a snapshot pickle (bytes), as `cachealloc
    explain` prints it. Raises CacheallocError for a malformed pickle."""
    out = ctypes.POINTER(ctypes.c_char)()
    n = ctypes.c_size_t()
    check(lib().cachealloc_diagnose_snapshot(
        data, len(data), -1 if memory_limit is None else memory_limit,
        -1 if budget_ms is None else budget_ms, path.encode() if path else None,
        ctypes.byref(out), ctypes.byref(n)))
    try:
        return ctypes.string_at(out, n.value).decode(errors="replace")
    finally:
        lib().cachealloc_release_buffer(out)


def budget(budget_ms: Optional[int] = None) -> int:
    """The what-if's wall-time bound at an OOM, ms: budget_ms, else
    $CACHEALLOC_OOM_BUDGET_MS, else BUDGET_MS (a slow or loaded host may
    need more to reach a suggestion). Raises ValueError for anything but
    an int >= 1 (naming where it came from)."""
    where = "budget_ms"
    if budget_ms is None:
        text = os.environ.get(BUDGET_ENV)
        if not text:
            return BUDGET_MS
        where = BUDGET_ENV
        budget_ms = int(text) if text.isdigit() else text
    if isinstance(budget_ms, bool) or not isinstance(budget_ms, int) or budget_ms < 1:
        raise ValueError(f"{where} must be a whole number of milliseconds >= 1, got {budget_ms!r}")
    return budget_ms


def ring_bytes(ring_mb: Optional[float] = None) -> int:
    """Host bytes of each device's request ring: ring_mb MiB, else
    $CACHEALLOC_OOM_RING_MB, else RING_MB. Raises ValueError for a value
    that is not a number > 0 (naming where it came from)."""
    where = "ring_mb"
    if ring_mb is None:
        text = os.environ.get(RING_ENV)
        if text is None or text == "":
            ring_mb = RING_MB
        else:
            where = RING_ENV
            try:
                ring_mb = float(text)
            except ValueError:
                raise ValueError(f"{RING_ENV} must be a number of MiB > 0, got {text!r}") from None
    if isinstance(ring_mb, bool) or not isinstance(ring_mb, (int, float)) or not ring_mb > 0 \
            or ring_mb > RING_MB_MAX:
        raise ValueError(f"{where} must be a number of MiB > 0 and at most {RING_MB_MAX} "
                         f"(16 GiB), got {ring_mb!r}")
    return max(32, int(ring_mb * (1 << 20)))


def request_rings() -> dict:
    """The request rings (cachealloc_requests_pickle): {"record_bytes",
    "records", "device_traces": [[entry, ...] per device], "wrapped": [...]}."""
    buf = ctypes.POINTER(ctypes.c_char)()
    n = ctypes.c_size_t()
    check(lib().cachealloc_requests_pickle(ctypes.byref(buf), ctypes.byref(n)))
    try:
        return plain_pickle.loads(ctypes.string_at(buf, n.value))
    finally:
        lib().cachealloc_release_buffer(buf)


def _requests_in(trace) -> int:
    return sum(1 for e in trace if isinstance(e, dict) and e.get("action") in _REQUEST_ACTIONS)


def with_request_ring(snap: dict, rings: dict) -> dict:
    """Puts each device's ring into snap["device_traces"] where it holds
    more requests than the history there (a history off, cut shorter by its
    own ring, or skipping actions), and says which under RING_KEY:
    {"bytes_per_device", "source": ["history" | "ring" per device],
    "wrapped": [whether that ring had dropped records]}. A snapshot without rings
    (recorder's ring off) is returned as it is."""
    ring_traces = rings.get("device_traces") or []
    if not rings.get("records") or not ring_traces:
        return snap
    traces = snap.setdefault("device_traces", [])
    while len(traces) < len(ring_traces):
        traces.append([])
    wrapped = list(rings.get("wrapped") or [])
    source = []
    for d, ring in enumerate(ring_traces):
        use_ring = _requests_in(ring) > _requests_in(traces[d])
        if use_ring:
            traces[d] = ring
        source.append("ring" if use_ring else "history")
    snap[RING_KEY] = {"bytes_per_device": rings["records"] * rings["record_bytes"],
                      "source": source, "wrapped": [bool(w) for w in wrapped]}
    return snap


def _snapshot_dict() -> dict:
    return snapshot()


def _observer(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
    """torch's OOM observer signature; leaves the diagnosis as the note."""
    recorder = _recorder
    if recorder is None:
        return
    lib().cachealloc_set_oom_note(recorder.record().encode())


_observer_attached = False


def start(directory: str, keep: int = DEFAULT_KEEP, torch_observer: bool = True,
          ring_mb: Optional[float] = None) -> FlightRecorder:
    """Turns the recorder on (once per process; a second call with another
    directory raises RuntimeError), with each device's request ring
    (ring_mb MiB, see ring_bytes) recording from now on. torch_observer:
    attach it to PyTorch's OOM observers (the glue calls them)."""
    global _recorder, _observer_attached
    if _recorder is not None:
        if os.path.abspath(_recorder.directory) != os.path.abspath(directory):
            raise RuntimeError(f"the OOM flight recorder already writes to {_recorder.directory!r}; "
                               f"it cannot switch to {directory!r}")
        return _recorder
    recorder = FlightRecorder(directory, keep, ring_mb=ring_mb)
    check(lib().cachealloc_record_requests(recorder.ring_bytes))
    if torch_observer and not _observer_attached:
        import torch

        torch._C._cuda_attach_out_of_memory_observer(_observer)
        _observer_attached = True
    _recorder = recorder
    return recorder


def stop() -> None:
    """Turns the recorder off: no snapshot or diagnosis at an OOM, and the
    request rings are dropped (their host memory freed)."""
    global _recorder
    _recorder = None
    lib().cachealloc_record_requests(0)  # turning off cannot fail


def recorder() -> Optional[FlightRecorder]:
    """The recorder in force, or None."""
    return _recorder


def note_for_raw_oom() -> str:
    """For cachealloc's own API (raw._malloc): the text to append to the
    OutOfMemoryError's message, "" when the recorder is off."""
    return "" if _recorder is None else "\n" + _recorder.record()
