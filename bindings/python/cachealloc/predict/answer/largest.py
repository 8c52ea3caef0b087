"""The largest size that fits, per native config and for the physical limit
(the largest size whose peak *allocated* bytes fit), each twice: as
predicted ("largest": what the engine's replay of the recording says) and
within the band ("largest_within_band": the largest size whose need plus
its band's high side fits, and whose replay at the limit fits). The answer
("largest_fitting") is the larger of the two configs' sizes within the band.
Within the band, every probed size below the answer fits within its band,
except sizes with convolution keys missing from the cuDNN table that fail
there only by those workspaces' bounds, below a size whose keys are all
measured (_Search._measured_answer; "passed_over_missing_keys" names them).

Sizes are expected to need more memory as they grow, but under a limit
the need is not always monotone (segment fragmentation): the search doubles
from `start` until the physical limit fails, bisects each criterion below
the smallest probe that does not fit, and checks a few sizes below each
config's answer (_Search._settle), recording each probed size once (one
worker process serves every probe; on request a second one records the
likely next size meanwhile, Ahead, which changes the time and not the
answer).
Two probes of different sizes that record the same requests mean the size
does not reach the step: an error (SizeNotReaching) saying how the size was
passed. A criterion still met at --max is reported as "at least" --max.
The whole search runs within one time budget (budget.py): each probe's
recording gets what is left, and a probe that starts with nothing left
ends the search with PredictionRefused (failure kind "timeout").
"""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, Dict, Optional

from ..device.failure import PredictionRefused
from ..gpus import Gpu
from . import band
from .budget import DEFAULT_TIMEOUT, Budget
from .ahead import Ahead
from .record import Session
from .search import NATIVE_CONFIGS, _facts, _judge, fallback_lines, measure, mode_of


class SizeNotReaching(ValueError):
    """The size under search does not change what the step asks for."""

    def __init__(self, message: str):
        super().__init__(message)
        self.failure = {"kind": "size_not_reaching", "where": None, "detail": message}


class Progress:
    """A one-line progress bar on stderr (only on a terminal, unless forced)."""

    def __init__(self, enabled: Optional[bool] = None, stream=sys.stderr):
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.t0 = time.perf_counter()

    def update(self, done: int, bound: int, text: str) -> None:
        if not self.enabled:
            return
        width = 24
        frac = min(1.0, done / max(bound, 1))
        bar = "#" * int(frac * width) + "." * (width - int(frac * width))
        self.stream.write(f"\r[{bar}] probe {done}/~{bound} {text} {time.perf_counter() - self.t0:5.1f}s ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")


def largest(target, gpu: Gpu, *, memory_fraction=None, steps=3, start=1, max_size=1 << 20,
            batch_arg=None, batch_env=None, workdir=None, progress: Optional[Progress] = None,
            no_optimizer_step=False, tuning: Optional[str] = None, mode="cpu-init",
            timeout=DEFAULT_TIMEOUT, ahead: Optional[bool] = None) -> dict:
    """mode and timeout as for fits(); timeout covers the whole search.
    ahead: record the likely next size in a second worker meanwhile
    (Ahead). The answer is the same either way. Default: off, unless the
    environment's CACHEALLOC_PREDICT_AHEAD is 1, and then only when a core
    is idle (the load average of the last minute at most the cores less
    one): on the shared 2-core machine at load 4 it made a search slower
    (92 s against 64 s), and its gain on an idle machine is not measured
    yet (docs/prediction.md, "Speed")."""
    t0 = time.perf_counter()
    budget = Budget(timeout)
    limit = gpu.usable(memory_fraction)
    progress = progress or Progress(False)

    started = []

    def new_session():
        # Each worker its own folder: its log and traces are its own.
        where = workdir if not started or workdir is None else os.path.join(
            workdir, f"worker{len(started)}")
        started.append(where)
        return Session(target, gpu, steps=steps, batch_arg=batch_arg, batch_env=batch_env,
                       workdir=where, no_optimizer_step=no_optimizer_step, mode=mode)
    session = new_session()
    if ahead is None:
        cores = os.cpu_count() or 1
        ahead = (os.environ.get("CACHEALLOC_PREDICT_AHEAD") == "1" and cores >= 2
                 and os.getloadavg()[0] <= cores - 1)
    spare = None
    try:
        spare = Ahead(session, new_session) if ahead else None
        search = _Search(session, gpu, limit, band.load(tuning), progress, budget, spare)
        answer = search.run(start, max_size)
    finally:
        session.close()
        if spare is not None:
            spare.close()
    answer.update({"gpu": gpu.name, "limit": limit, "memory_fraction": memory_fraction,
                   "context_bytes_assumed": gpu.context_bytes, "steps_requested": steps,
                   "no_optimizer_step": no_optimizer_step, "seconds": time.perf_counter() - t0})
    return answer


def how_passed(session: Session, size: int) -> str:
    if isinstance(session.target, str):
        return f"as the builder's argument ({session.target}({size}))"
    if session.batch_arg:
        return f"as the script argument {session.batch_arg} {size} (--batch-arg {session.batch_arg})"
    return f"as the environment variable {session.batch_env}={size} (--batch-env {session.batch_env})"


class _Search:
    BIG = float(2 ** 62)      # over() of a need that cannot be met (min_memory None, no bound)

    def __init__(self, session, gpu, limit, data, progress, budget: Optional[Budget] = None,
                 ahead: Optional[Ahead] = None):
        self.session, self.gpu, self.limit, self.data, self.progress = session, gpu, limit, data, progress
        self.budget = budget or Budget(None)
        self.ahead = ahead
        self.probes: Dict[int, dict] = {}     # size -> measure()'s configs, banded
        self.summaries: Dict[int, dict] = {}  # size -> the recording's summary
        self.bands: Dict[int, dict] = {}      # size -> band.bands less its per-config part
        self.traces: Dict[int, str] = {}      # size -> the recording's trace (the page's shown size)

    def probe(self, size: int, hint: Optional[int] = None) -> dict:
        """size's measures, recorded now (or taken from the second worker,
        Ahead); hint: the size the search will likely ask for next."""
        if size not in self.probes:
            n = len(self.probes)
            self.progress.update(n + 1, max(n + 2, 2 * n.bit_length() + 4), f"size={size}")
            self.budget.check(f"before size {size} was recorded")
            if hint in self.probes:
                hint = None
            rec = (self.ahead.record(size, hint, self.budget.left())
                   if self.ahead is not None else self.session.record(size, timeout=self.budget.left()))
            self.budget.check(f"after size {size} was recorded, before its replay")
            m = measure(rec.trace, self.limit, rec.summary.get("workspace_upper_trace"))
            self.bands[size] = _judge(rec.summary, self.gpu, m, self.limit, self.data)
            self.probes[size], self.summaries[size] = m, rec.summary
            self.traces[size] = str(rec.trace)
            if self.ahead is not None and not Ahead.affordable(rec.summary):
                self.session = self.ahead.close_spare()
                self.ahead = None
            self._check_reaches(size)
        return self.probes[size]

    def _check_reaches(self, size: int) -> None:
        """SizeNotReaching when another probed size recorded the same
        requests (count and bytes) and the same peaks."""
        def same(s):
            a, b = self.summaries[s], self.summaries[size]
            return (a.get("allocations"), a.get("requested_bytes")) == \
                (b.get("allocations"), b.get("requested_bytes")) and all(
                    self.probes[s][n]["peak_allocated"] == self.probes[size][n]["peak_allocated"]
                    for n in NATIVE_CONFIGS)
        other = next((s for s in self.probes if s != size and same(s)), None)
        if other is None:
            return
        lo, hi = sorted((other, size))
        s = self.summaries[size]
        raise SizeNotReaching(
            f"the size does not reach the step: sizes {lo} and {hi} recorded the same "
            f"{s.get('allocations')} allocations ({s.get('requested_bytes')} bytes) and the same "
            f"peaks, so the peak does not grow with the size. It was passed "
            f"{how_passed(self.session, hi)}: does the step read it?")

    def _bisect(self, ok: Callable[[int], bool], over: Callable[[int], float], hi_bad: int) -> int:
        """The largest size with ok(size), below hi_bad. Each next probe is
        where the bracketing probes' over() (bytes over the limit: <= 0
        where it fits, near-linear in the size) crosses zero, kept strictly
        inside the bracket: a step whose memory is linear in the size is
        settled in about two probes per criterion instead of log2(range)."""
        # Below the smallest probe that does not fit: where the need is not
        # monotone, a fitting size above a failing one is not the answer.
        hi = min([hi_bad, *(s for s in self.probes if not ok(s))])
        lo = max([0, *(s for s in self.probes if s < hi and ok(s))])
        edge_steps = 0          # secant guesses in a row that landed next to the bracket's end
        while hi - lo > 1:
            mid = (lo + hi) // 2
            a = over(lo) if lo in self.probes else (-self.limit if lo == 0 else None)
            b = over(hi) if hi in self.probes else None
            if a is not None and b is not None and a < b < self.BIG and edge_steps < 2:
                guess = max(lo + 1, min(hi - 1, lo + int((hi - lo) * (-a) / (b - a))))
                edge_steps = edge_steps + 1 if guess in (lo + 1, hi - 1) else 0
                mid = guess
            else:               # no usable line (or it keeps creeping): halve
                edge_steps = 0
            # Next, most often: mid + 1 (the guess is the line's last size
            # that fits, so it usually does).
            self.probe(mid, mid + 1 if mid + 1 < hi else None)
            if ok(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def _settle(self, ok: Callable[[int], bool], over: Callable[[int], float], hi_bad: int) -> int:
        """_bisect's answer, checked below: under a limit the need is not
        always monotone in the size. Classic's segments fragment differently
        at each size (timm EfficientNet-B2 with checkpointing under 2,056
        MiB: the replay fits at 94-97, not at 98-102, again at 103, 105 and
        107, and the GPU trained 97 and failed at 98 and 99), and the secant
        steps can land on a fitting size above failing ones. So the answer
        is a size below which nothing probed fails: SAMPLES sizes spread
        between the largest fitting probe below it and it are probed, and
        at the first that does not fit the search bisects again below it.
        A monotone step pays those probes and keeps its answer."""
        L = self._bisect(ok, over, hi_bad)
        for _ in range(self.ROUNDS):
            g = max([0, *(s for s in self.probes if s < L and ok(s))])
            if L - g <= 2:
                return L
            picks = sorted({g + (L - g) * k // (self.SAMPLES + 1) for k in range(1, self.SAMPLES + 1)}
                           - {g, L})
            failed = None
            for m in picks:
                self.probe(m)
                if not ok(m):
                    failed = m
                    break
            if failed is None:
                return L
            L = self._bisect(ok, over, failed)
        return L

    def _resettle(self, *tables, hi_bad: int) -> None:
        """A later criterion's probes can show a size failing below an
        answer settled earlier: settle that answer again, until none moves
        (each move lowers an answer below a failing probe, so this ends).
        tables: (answers {name: size}, criteria {name: (ok, over)}) pairs,
        answers updated in place; the configs only (physical is monotone)."""
        moved = True
        while moved:
            moved = False
            for answers, criteria in tables:
                for name in NATIVE_CONFIGS:
                    ok, over = criteria[name]
                    if any(s < answers[name] and not ok(s) for s in self.probes):
                        answers[name] = self._settle(ok, over, hi_bad)
                        moved = True

    def _only_missing_keys(self, s: int, name: str) -> bool:
        """Whether size s fits criterion `name` (a config, or "physical")
        within a band made as if none of its convolution keys were missing
        (_band_without_missing_keys): then it
        fails within its real band only by the missing-key items, which
        take each missing workspace at its shape class's bound (often
        several times the real one). The rest of the band (the class's
        share, the GPU's noise, the placement spread, other items) still
        counts. False for a size with no missing key."""
        if not self.summaries[s].get("cudnn_missing_keys"):
            return False
        alt = self._band_without_missing_keys(s)
        if name == "physical":
            return self._allocated_over(s, {n: b["peak_allocated"][1] for n, b in alt.items()}) <= 0
        c = self.probes[s][name]
        return band.judge(c["min_memory"], c["fits"], alt[name]["min_memory"], self.limit) == "fits"

    def _allocated_over(self, s: int, highs: Optional[dict] = None) -> float:
        """Bytes by which size s's peak allocated (the highest of its
        configs') passes the limit: the physical criterion, <= 0 where it
        fits. With highs ({config: band's high side, bytes, or None}) each
        config's high side is added first; BIG when one is unbounded."""
        P = self.probes[s]
        if highs is not None and None in highs.values():
            return self.BIG
        return max(c["peak_allocated"] + (highs[n] if highs else 0) for n, c in P.items()) - self.limit

    def _band_without_missing_keys(self, s: int) -> dict:
        """{config: band.bands' per-config bands} of size s as if none of its
        convolution keys were missing; made when asked (only sizes that
        fail within their band with missing keys are)."""
        summary = {**self.summaries[s], "cudnn_missing_keys": {}}
        return band.bands(summary, self.gpu, self.probes[s], self.data)["configs"]

    def _measured_between(self, name: str, ok_banded: Callable[[int], bool],
                          ok_raw: Callable[[int], bool], over_raw: Callable[[int], float],
                          answered: int) -> tuple:
        """_measured_answer, after probing the sizes it did not see: the
        search's probes cluster where the missing keys' wide bands put the
        banded answer, so below the first measured size that fails for
        certain there may be measured sizes no probe reached (holdout 33's
        PoolFormer-S12 under its own probe: keys missing at 33-53, measured
        at 54-96; the search probed 36-53 and 64, never 54-63, and answered
        39 where the GPU trains 64). So the sizes between the scan's last
        and the one it stopped at are bisected with "fits within its band,
        or fails there only by its missing keys" (the scan's own rule), and
        scanned again. Only when the scan stopped at a measured size (with
        no measured key near, no table, the bisection would probe sizes that
        can only be passed over) more than one above the search's own answer
        within the band (`answered`): nothing else could raise that."""
        best, passed, stop, last = self._measured_answer(name, ok_banded, ok_raw)
        if (stop is None or stop - last <= 1 or stop - 1 <= answered
                or self.summaries[stop].get("cudnn_missing_keys")):
            return best, passed

        def ok_scan(s):
            return ok_raw(s) and (ok_banded(s) or (
                bool(self.summaries[s].get("cudnn_missing_keys"))
                and self._only_missing_keys(s, name)))
        self._bisect(ok_scan, over_raw, stop + 1)
        return self._measured_answer(name, ok_banded, ok_raw)[:2]

    def _measured_answer(self, name: str, ok_banded: Callable[[int], bool],
                         ok_raw: Callable[[int], bool]) -> tuple:
        """(size, [sizes passed over]): the largest probed size whose
        convolutions' workspaces are all measured (no key missing from the
        cuDNN table) and that fits within its band, with no failure for
        certain below it; and the sizes below it that failed within their
        band only by their missing keys (_only_missing_keys), which it
        passed over. A failure for certain: a size whose replay does not fit
        as predicted, a measured size failing within its band, or a size
        with missing keys that fails within its band even without them.
        With a partly probed table (the keys of a few sizes measured, as
        `cudnn_keys.py` writes them) the sizes between the measured ones
        would otherwise hold the answer far below what the measured sizes
        show (holdout 30's DLA-34 under its own probe: 56, where sizes up to
        94 train on the GPU). (0, [], ...) when no probe qualifies. Also
        (stop, last): the probe the scan stopped at (None: none) and the
        last one before it. Uses the probes made; probes nothing."""
        best, passed, over_so_far, last = 0, [], [], 0
        for s in sorted(self.probes):
            measured = not self.summaries[s].get("cudnn_missing_keys")
            if not ok_raw(s):
                return best, passed, s, last
            if ok_banded(s):
                if measured:
                    best, passed = s, list(over_so_far)
                last = s
                continue
            if measured or not self._only_missing_keys(s, name):
                return best, passed, s, last
            over_so_far.append(s)
            last = s
        return best, passed, None, last

    SAMPLES = 2        # sizes checked between an answer and the fitting probe below it
    ROUNDS = 3         # answers checked so, at most, per criterion

    def run(self, start: int, max_size: int) -> dict:
        limit, P = self.limit, self.probes

        big = self.BIG

        def need(s, name, banded=False):
            c = P[s][name]
            high = c["band"]["min_memory"][1]
            if c["min_memory"] is None or (banded and high is None):
                return big
            return c["min_memory"] + (high if banded else 0) - limit

        def peak(s, banded=False):
            return self._allocated_over(s, {n: c["band"]["peak_allocated"][1]
                                            for n, c in P[s].items()} if banded else None)

        def physical(s):
            return peak(s) <= 0

        # (ok, over) per criterion: as predicted, and within the band.
        raw = {"classic": (lambda s: P[s]["classic"]["fits"], lambda s: need(s, "classic")),
               "expandable": (lambda s: P[s]["expandable"]["fits"], lambda s: need(s, "expandable")),
               "physical": (physical, peak)}
        banded = {"classic": (lambda s: P[s]["classic"]["verdict"] == "fits",
                              lambda s: need(s, "classic", True)),
                  "expandable": (lambda s: P[s]["expandable"]["verdict"] == "fits",
                                 lambda s: need(s, "expandable", True)),
                  "physical": (lambda s: peak(s, True) <= 0, lambda s: peak(s, True))}
        # Bracket: double until the loosest criterion (physical) fails.
        hi_bad = None
        size = max(1, start)
        while size <= max_size:
            self.probe(size, 2 * size if 2 * size <= max_size else None)
            if not physical(size):
                hi_bad = size
                break
            size *= 2
        reached_max = hi_bad is None
        if reached_max:
            hi_bad = max_size + 1
        def answer(name, ok, over):
            # The physical limit (peak allocated) grows with the size: bisected
            # alone. The configs' needs are checked below their answers.
            return (self._bisect if name == "physical" else self._settle)(ok, over, hi_bad)
        found = {name: answer(name, *c) for name, c in raw.items()}
        within = {name: answer(name, *c) for name, c in banded.items()}
        self._resettle((found, raw), (within, banded), hi_bad=hi_bad)
        # A measured size fitting within its band answers above sizes that
        # fail there only by their missing keys (_measured_answer); the
        # sizes it passed over are said beside the answer.
        # The measured sizes no probe reached are probed first (_measured_between);
        # those probes may show a size failing below an answer settled above,
        # so the answers are settled again. They are extra: a search whose
        # time runs out there, or whose new size records the same step as
        # another, keeps the answers it had before them.
        settled, n = (dict(found), dict(within)), len(self.probes)
        try:
            for name, (ok, _) in banded.items():
                self._measured_between(name, ok, *raw[name], within[name])
            if len(self.probes) != n:
                self._resettle((found, raw), (within, banded), hi_bad=hi_bad)
        except (PredictionRefused, SizeNotReaching):
            found, within = dict(settled[0]), dict(settled[1])
            kept = list(self.probes)[:n]
            for d in (self.probes, self.summaries, self.bands, self.traces):
                for s in [s for s in d if s not in kept]:
                    del d[s]
        passed_over = {}
        for name, (ok, _) in banded.items():
            size, passed = self._measured_answer(name, ok, raw[name][0])[:2]
            if size > within[name]:
                within[name], passed_over[name] = size, passed
        self.progress.close()
        answer = self._answer(found, within, max_size if reached_max else None)
        answer["passed_over_missing_keys"] = passed_over
        return answer

    def _answer(self, found: dict, within: dict, at_max: Optional[int]) -> dict:
        P = self.probes
        best_size = max(within["classic"], within["expandable"])
        # Fallbacks at each config's largest fitting size (none fits: nothing to say).
        at = {name: (found[name], P[found[name]][name] if found[name] else None)
              for name in NATIVE_CONFIGS}
        smallest = min(P)
        shown = best_size or max(found["classic"], found["expandable"]) or smallest
        modelled = list(self.summaries[shown].get("modelled", []))
        if found["classic"] or found["expandable"]:
            modelled += fallback_lines(self.summaries[shown], at)
        if best_size:
            verdict = "fits"
        elif all(c["verdict"] == "does_not_fit" for c in P[smallest].values()):
            verdict = "does_not_fit"
        else:
            verdict = "too_close_to_call"
        answer = {
            "verdict": verdict, "largest": found, "largest_within_band": within,
            # Still met at --max: the true largest is at least that.
            "at_least": {name: at_max is not None and n == at_max for name, n in within.items()},
            "at_least_predicted": {name: at_max is not None and n == at_max
                                   for name, n in found.items()},
            "max_size": at_max,
            "settings": (NATIVE_CONFIGS["expandable"] if within["expandable"] > within["classic"]
                         else NATIVE_CONFIGS["classic"]),
            "largest_fitting": best_size, "shown_size": shown,
            "steps": min(s["steps"] for s in self.summaries.values()),
            "probes": {str(s): m for s, m in sorted(P.items())},
            "cudnn": {str(s): self.summaries[s].get("cudnn") for s in sorted(P)},
            "cudnn_missing": {str(s): list(self.summaries[s].get("cudnn_missing_keys") or ())
                              for s in sorted(P)},
            "modelled": modelled,
            "cudnn_fallbacks": {name: None if c is None else {
                "size": size, "fallbacks": c["fallbacks"], "fallback_skips": c["fallback_skips"]}
                for name, (size, c) in at.items()}}
        answer.update(_facts(self.summaries[shown], self.bands[shown], self.data))
        answer.update(mode_of(self.summaries.values()))   # every probe's mode, not the shown one's
        # The shown size's missing keys are in cudnn_missing already.
        answer["recording"] = {k: v for k, v in self.summaries[shown].items()
                               if k != "cudnn_missing_keys"}
        answer["trace"] = self.traces[shown]
        return answer

