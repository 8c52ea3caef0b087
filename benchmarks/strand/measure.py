#!/usr/bin/env python3
"""Where does PyTorch's native allocator strand memory? The strand suite's
driver (issue 48): every workload of suite.py, every measurement in fresh
processes (child.py), side by side on one GPU within a memory budget
(pool.py), under a deadline; results written as they come.

    python benchmarks/strand/measure.py --out DIR [--limit-gib 6] [--budget 480]
        [--workloads a,b] [--policies stitch,unmap_on_free] [--rounds 5]
        [--reuse OLD/strand.json]

Per workload, in this order of priority (native first, then our policies,
then timing; `--budget` seconds in all):
 1. physical: the largest size whose peak ALLOCATED fits the limit
    (search.physical; each probe runs native expandable under a cap of 2 x
    the limit: a probe that OOMs there is counted as over);
 2. its trace, recorded under cachealloc (native policy) at that size, no
    limit -> DIR/traces/NAME.pickle.gz + .json (for tests/data and the
    lab's policy table), and `cachealloc advise` on it with the memory
    limit and the device's memory: "advised" is native under that line;
 3. for each allocator -- native classic, native expandable, advised, and
    cachealloc under each policy -- the largest size that runs under the
    limit (torch.cuda.set_per_process_memory_fraction), one fresh process
    per probe (search.largest, starting at the physical size), with peak
    reserved and allocated at the physical size and at its own largest;
    and "open" peaks at the physical size under a cap of 2 x the limit;
 4. step time: one persistent process per allocator at 95 % of the largest
    size all of them run, under the limit; >= --rounds rounds, each running the same
    steps in every process one process after another (the order rotates);
    the per-round ratio to native classic and to native's best, median and
    spread.

`--reuse OLD.json[,...]`: native's measurements of an earlier run (same
limit and grain) stand in for steps 1-3's native part: the physical size,
the trace and advise's line, and native classic, expandable and advised
(their largest sizes, peaks and probes) are taken from the last file that
measured the workload, and only our policies are searched; the timing (4)
still runs native beside them in this run. Workloads none of the files
measured are measured in full.

Native's best: of classic, expandable and advised, the largest size, then
the lower peak reserved there. A workload strands memory under native when
native's best stops below the physical size, or reserves >= 1.05 x what it
allocates at its largest.

Writes DIR/strand.json (rewritten after every result, so a cut-off run
leaves what it had) and DIR/strand.md (report.py). `--device cpu` runs the
same logic on the CPU at tiny sizes for tests (peaks are resident memory;
allocators do not differ there).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import pathlib
import queue
import statistics
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import pool as pool_mod  # noqa: E402
import report  # noqa: E402
import search  # noqa: E402
import suite  # noqa: E402

GIB = 1 << 30
CONTEXT = GIB  # device memory a CUDA context and torch's workspaces take beside the limit
NATIVE = ["classic", "expandable", "advised"]
SAME_AS = {"": "classic", "expandable_segments:True": "expandable"}
# Priorities: lower first (pool.py).
P_PHYSICAL, P_TRACE, P_NATIVE, P_NATIVE_OPEN, P_POLICY, P_POLICY_OPEN = range(6)


class Driver:
    def __init__(self, a):
        self.a = a
        self.out = pathlib.Path(a.out)
        (self.out / "traces").mkdir(parents=True, exist_ok=True)
        self.cpu = a.device == "cpu"
        self.t0 = time.monotonic()
        self.probe_deadline = self.t0 + a.budget * (1 - a.timing_share)
        self.deadline = self.t0 + a.budget
        self.limit = int(a.limit_gib * GIB)
        self.lock = threading.RLock()
        self.res = {"meta": {"args": vars(a), "limit": self.limit, "started": time.time()},
                    "workloads": {}}
        self.device_info()
        budget = (self.res["meta"]["total"] * 0.92) if not self.cpu else 1 << 62
        self.pool = pool_mod.Pool(int(budget), a.jobs, deadline=self.probe_deadline)
        self.policies = [p for p in (a.policies.split(",") if a.policies is not None
                                     else self.known_policies()) if p and p != "native"]
        if not self.cpu:
            known = self.known_policies()
            for name in self.policies:
                if name not in known:
                    raise SystemExit(f"measure: unknown policy {name!r}: known policies are "
                                     f"{', '.join(known)}")
        self.res["meta"]["policies"] = self.policies

    # -- setup -------------------------------------------------------------
    def device_info(self):
        m = self.res["meta"]
        if self.cpu:
            m.update(total=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), device="cpu")
            return
        code = ("import json, torch; p = torch.cuda.get_device_properties(0); print(json.dumps("
                "{'total': p.total_memory, 'device': p.name, 'torch': torch.__version__, "
                "'cuda': torch.version.cuda}))")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise SystemExit(f"measure: cannot read the GPU's properties:\n{p.stderr[-2000:]}")
        m.update(json.loads(p.stdout.strip().splitlines()[-1]))

    def known_policies(self):
        sys.path.insert(0, str(ROOT / "bindings" / "python"))
        import cachealloc

        return cachealloc.policies()

    def elapsed(self):
        return time.monotonic() - self.t0

    def probes_over(self):
        return time.monotonic() > self.probe_deadline

    def save(self):
        with self.lock:
            self.res["meta"]["elapsed_s"] = self.elapsed()
            tmp = self.out / "strand.json.tmp"
            tmp.write_text(json.dumps(self.res, indent=1, default=str))
            tmp.replace(self.out / "strand.json")
            (self.out / "strand.md").write_text(report.markdown(self.res))

    # -- probes ------------------------------------------------------------
    def cmd(self, name, kind, size, *, limit=0, conf="", trace="", steps=None):
        c = [sys.executable, str(HERE / "child.py"), "--workload", name, "--kind", kind,
             "--size", str(size), "--steps", str(steps or self.a.steps), "--device", self.a.device,
             "--limit", str(int(limit))]
        if conf:
            c += ["--conf", conf]
        if trace:
            c += ["--trace", trace]
        return c

    def run(self, name, kind, sizes, *, limit, priority, conf="", trace="", mem=None):
        """Runs one probe per size side by side; reruns once a probe whose
        OOM came from a full device rather than its own limit."""
        mem = (mem or limit or 2 * self.limit) + CONTEXT
        cmds = [self.cmd(name, kind, s, limit=limit, conf=conf, trace=trace) for s in sizes]
        outs = self.pool.run_many(cmds, mem, self.a.probe_timeout, priority)
        for i, o in enumerate(outs):
            if o.get("outcome") == "oom" and 0 <= o.get("device_free_at_oom", 1 << 62) < CONTEXT:
                o2 = self.pool.submit(cmds[i], mem, self.a.probe_timeout, priority).result()
                o2["rerun_after_full_device"] = True
                outs[i] = o2
        for s, o in zip(sizes, outs):
            o["size"] = s
        return outs

    @staticmethod
    def brief(o):
        keep = ("size", "outcome", "message", "peak_allocated", "peak_reserved", "device_allocs",
                "device_frees", "retries", "ooms", "seconds", "step_s", "rerun_after_full_device")
        out = {k: o[k] for k in keep if k in o}
        if o.get("outcome") == "error":  # what went wrong, briefly
            out["detail"] = (o.get("traceback") or o.get("stderr") or "")[-800:]
        return out

    # -- one workload ----------------------------------------------------
    def reused(self, name, grain):
        """The workload's native measurements from --reuse files (the last
        file that has a physical size and a native best for it), or None."""
        found = None
        for path in self.a.reuse.split(",") if self.a.reuse else []:
            W = json.loads(pathlib.Path(path).read_text()).get("workloads", {}).get(name)
            if not W or (W.get("physical") or {}).get("value") is None or not W.get("native_best"):
                continue
            if W.get("limit") != self.limit or W.get("grain") != grain:
                raise SystemExit(f"measure: --reuse {path}: {name} was measured under limit "
                                 f"{W.get('limit')} and grain {W.get('grain')}, this run uses "
                                 f"{self.limit} and {grain}")
            found = (path, W)
        return found

    def workload(self, name):
        spec = suite.spec(name)
        grain = spec.grain(self.a.device)
        old = self.reused(name, grain)
        if old is not None:
            return self.policies_only(name, *old)
        start = spec.tiny * 4 if self.cpu else spec.start_cuda
        start = max(grain, start // grain * grain)
        W = {"unit": spec.unit, "grain": grain, "limit": self.limit, "probes": {}, "kinds": {}}
        with self.lock:
            self.res["workloads"][name] = W
        # Peak allocated does not depend on the allocator; the cap only bounds
        # the probe's memory. Twice the limit: a run whose freed blocks wait on
        # stream events reserves well above what it allocates.
        phys_cap = 2 * self.limit

        def phys_probe(sizes):
            outs = self.run(name, "expandable", sizes, limit=phys_cap, priority=P_PHYSICAL)
            W["probes"].setdefault("physical", []).extend(self.brief(o) for o in outs)
            return [o.get("peak_allocated") if o.get("outcome") == "ok" else
                    None if o.get("outcome") == "oom" else
                    search.SKIP if o.get("outcome") == "skipped" else search.ERROR for o in outs]

        r = search.physical(phys_probe, start, grain, self.limit, rel_res=self.a.rel_res,
                            width=self.a.width, stop=lambda: self.probes_over()
                            or only_errors(W["probes"]["physical"]))
        W["physical"] = r.as_dict()
        self.save()
        if r.value is None:
            phys = W["probes"].get("physical", [])
            W["note"] = ("no size's peak allocated fits the limit" if r.converged else
                         "every probe failed: " + str(phys[0].get("message")) if only_errors(phys)
                         else "out of time")
            return
        P = r.value
        conf = self.trace_and_advise(name, W, P)
        kinds = ["classic", "expandable"]
        if conf is not None:
            if conf in SAME_AS:
                W["advised_same_as"] = SAME_AS[conf]
            else:
                kinds.append("advised")
        kinds += ["policy:" + p for p in self.policies]
        with cf.ThreadPoolExecutor(max_workers=2 * len(kinds)) as ex:
            futs = [ex.submit(self.kind_largest, name, W, k, P, conf or "") for k in kinds]
            if not self.a.no_open:
                futs += [ex.submit(self.open_peaks, name, W, k, P, conf or "") for k in kinds]
            for f in futs:
                f.result()
        if "advised_same_as" in W:
            W["kinds"]["advised"] = dict(W["kinds"].get(W["advised_same_as"], {}),
                                         same_as=W["advised_same_as"])
        W["native_best"] = native_best(W)
        self.save()

    def policies_only(self, name, path, old):
        """Native's part from an earlier run (--reuse); our policies searched
        and their open peaks measured here, as workload() does."""
        keep = ("unit", "grain", "limit", "physical", "trace", "advise", "advised_same_as")
        W = {k: old[k] for k in keep if k in old}
        W["reused_from"] = str(path)
        W["kinds"] = {k: v for k, v in (old.get("kinds") or {}).items() if k in NATIVE}
        W["probes"] = {k: v for k, v in (old.get("probes") or {}).items() if k in NATIVE + ["physical"]}
        with self.lock:
            self.res["workloads"][name] = W
        P = W["physical"]["value"]
        conf = (W["kinds"].get("advised") or {}).get("conf", "")
        kinds = ["policy:" + p for p in self.policies]
        # Native's open peaks the earlier run skipped (out of time) are
        # measured here: the memory rule (at most 1 % over native's best)
        # needs them. An advised config equal to another kind copies it.
        native_open = [k for k in NATIVE if k in W["kinds"] and not W["kinds"][k].get("same_as")
                       and (W["kinds"][k].get("open") or {}).get("outcome") != "ok"]
        with cf.ThreadPoolExecutor(max_workers=max(1, 2 * len(kinds) + len(native_open))) as ex:
            futs = [ex.submit(self.kind_largest, name, W, k, P, conf) for k in kinds]
            if not self.a.no_open:
                futs += [ex.submit(self.open_peaks, name, W, k, P, conf) for k in kinds + native_open]
            for f in futs:
                f.result()
        same = W.get("advised_same_as")
        if same and "advised" in W["kinds"] and same in W["kinds"]:
            W["kinds"]["advised"] = dict(W["kinds"][same], same_as=same)
        W["native_best"] = native_best(W)
        self.save()

    def trace_and_advise(self, name, W, P):
        """Records the trace at size P (cachealloc, native policy, no limit);
        returns advise's line for the limit, or None without one."""
        if self.cpu:
            W["advise"] = {"skipped": "traces are recorded on CUDA only"}
            return None
        path = self.out / "traces" / name
        o = self.run(name, "cachealloc", [P], limit=0, priority=P_TRACE, trace=str(path),
                     mem=2 * self.limit)[0]
        W["trace"] = self.brief(o) | {"path": o.get("trace"), "events": o.get("trace_events")}
        if o.get("outcome") != "ok" or not o.get("trace"):
            W["advise"] = {"error": "no trace: " + str(o.get("message"))}
            return None
        sys.path.insert(0, str(ROOT / "bindings" / "python"))
        from cachealloc import lab

        try:
            adv = lab.advise(o["trace"], memory_limit=self.limit,
                             device_memory=self.res["meta"]["total"], threads=self.a.advise_threads)
        except Exception as e:  # noqa: BLE001 - recorded; the native kinds still run
            W["advise"] = {"error": f"{type(e).__name__}: {e}"}
            return None
        W["advise"] = {k: adv.get(k) for k in ("recommendation", "headline", "reason", "nothing_helps",
                                               "saving", "seconds")}
        return adv.get("recommendation") or ""

    def kind_largest(self, name, W, kind, P, conf):
        native = kind in NATIVE
        prio = P_NATIVE if native else P_POLICY
        kconf = conf if kind == "advised" else ""

        def probe(sizes):
            outs = self.run(name, kind, sizes, limit=self.limit, priority=prio, conf=kconf)
            W["probes"].setdefault(kind, []).extend(self.brief(o) for o in outs)
            return [True if o.get("outcome") == "ok" else
                    False if o.get("outcome") == "oom" else
                    search.SKIP if o.get("outcome") == "skipped" else search.ERROR for o in outs]

        r = search.largest(probe, P, W["grain"], rel_res=self.a.rel_res, width=self.a.width,
                           stop=lambda: self.probes_over() or only_errors(W["probes"][kind]))
        by_size = {p["size"]: p for p in W["probes"][kind]}
        W["kinds"].setdefault(kind, {}).update(
            largest=r.as_dict(), conf=kconf or child_conf(kind),
            at_physical=by_size.get(P), at_largest=by_size.get(r.value) if r.value else None)
        self.save()

    def open_peaks(self, name, W, kind, P, conf):
        prio = P_NATIVE_OPEN if kind in NATIVE else P_POLICY_OPEN
        o = self.run(name, kind, [P], limit=2 * self.limit, priority=prio,
                     conf=conf if kind == "advised" else "")[0]
        W["kinds"].setdefault(kind, {})["open"] = self.brief(o)
        self.save()

    # -- timing ----------------------------------------------------------
    def timing(self, names):
        T = self.res.setdefault("timing", {})
        for n_left, name in zip(range(len(names), 0, -1), names):
            slot = (self.deadline - time.monotonic()) / n_left
            if slot < 10:
                T[name] = {"skipped": "out of time"}
                continue
            try:
                T[name] = self.time_workload(name, time.monotonic() + slot)
            except Exception as e:  # noqa: BLE001 - keep the others
                T[name] = {"error": f"{type(e).__name__}: {e}"}
            self.save()

    def time_workload(self, name, until):
        W = self.res["workloads"].get(name, {})
        order = NATIVE + ["policy:" + p for p in self.policies]
        kinds = [k for k in order if not (W.get("kinds", {}).get(k) or {}).get("same_as")
                 and ((W.get("kinds", {}).get(k) or {}).get("largest") or {}).get("value")]
        if "classic" not in kinds:
            return {"skipped": "native classic has no largest size"}
        # 95 % of the smallest largest size: a timing process runs more steps
        # than a probe did, and must not meet an OOM the probe did not.
        grain = W["grain"]
        size = max(grain, int(0.95 * min(W["kinds"][k]["largest"]["value"] for k in kinds)) // grain * grain)
        if not self.cpu and len(kinds) * (self.limit + CONTEXT) > self.res["meta"]["total"] * 0.92:
            return {"skipped": f"{len(kinds)} processes of {self.a.limit_gib} GiB do not fit the GPU"}
        logs = self.out / "logs"
        logs.mkdir(exist_ok=True)
        workers = {k: Worker(self.cmd(name, k, size, limit=self.limit,
                                      conf=W["kinds"][k].get("conf", "") if k == "advised" else "")
                             + ["--serve", "--warmup", str(self.a.warmup)],
                             logs / f"timing_{name}_{k.replace(':', '_')}.log") for k in kinds}
        out = {"size": size, "kinds": kinds, "round_steps": self.a.round_steps, "rounds": {},
               "errors": {}}
        try:
            for k, w in workers.items():
                ready = w.read(max(5.0, until - time.monotonic()))
                if not ready or not ready.get("ready"):
                    out["errors"][k] = ready or {"message": "no answer"}
            live = [k for k in kinds if k not in out["errors"]]
            for r in range(self.a.rounds):
                if time.monotonic() > until or "classic" not in live:
                    break
                first = self.a.warmup + r * self.a.round_steps
                order = live[r % len(live):] + live[:r % len(live)]
                for k in order:
                    workers[k].send(f"run {first} {first + self.a.round_steps}")
                    ans = workers[k].read(max(5.0, until - time.monotonic() + 30))
                    if not ans or "step_s" not in ans:
                        out["errors"][k] = ans or {"message": "no answer"}
                        live.remove(k)
                        continue
                    out["rounds"].setdefault(k, []).append(sum(ans["step_s"]))
        finally:
            for w in workers.values():
                w.stop()
        out["ratios"] = ratios(out["rounds"], W.get("native_best"))
        return out

    def main(self):
        names = self.a.workloads.split(",") if self.a.workloads else suite.names()
        for n in names:
            suite.spec(n)  # unknown names fail here, before any work
        with cf.ThreadPoolExecutor(max_workers=len(names)) as ex:
            futs = {ex.submit(self.workload, n): n for n in names}
            for f in cf.as_completed(futs):
                try:
                    f.result()
                except Exception as e:  # noqa: BLE001 - keep the others
                    self.res["workloads"].setdefault(futs[f], {})["error"] = f"{type(e).__name__}: {e}"
        self.pool.close()
        self.res["meta"]["probe_phase_s"] = self.elapsed()
        self.res["meta"]["processes"] = self.pool.started
        self.save()
        if not self.a.no_timing:
            self.timing(names)
        self.res["meta"]["done"] = True
        self.save()


def only_errors(probes):
    """Every probe so far failed for another reason than memory (a broken
    workload or allocator): probing further would only repeat it."""
    return bool(probes) and all(p.get("outcome") == "error" for p in probes)


def child_conf(kind):
    return {"classic": "", "expandable": "expandable_segments:True"}.get(kind, "")


def native_best(W):
    """Of the native kinds with a largest size: the largest, then the lower
    peak reserved at it."""
    best, key = None, None
    for k in NATIVE:
        v = W["kinds"].get(k) or {}
        size = (v.get("largest") or {}).get("value")
        if not size:
            continue
        reserved = ((v.get("at_largest") or {}).get("peak_reserved") or 1 << 62)
        if key is None or (size, -reserved) > key:
            best, key = k, (size, -reserved)
    return best


def ratios(rounds, best):
    """Per kind: its per-round time over native classic's and over native's
    best's (the same round's steps), as median, min, max and count."""
    out = {}
    for label, base in (("vs_classic", "classic"), ("vs_native_best", best)):
        if not base or base not in rounds:
            continue
        for k, ts in rounds.items():
            rs = [t / b for t, b in zip(ts, rounds[base]) if b > 0]
            if rs:
                out.setdefault(k, {})[label] = {"median": statistics.median(rs), "min": min(rs),
                                                "max": max(rs), "n": len(rs)}
    return out


class Worker:
    """A timing process (child.py --serve) with a line reader thread."""

    def __init__(self, cmd, log_path):
        self.log = open(log_path, "w")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, text=True, bufsize=1)
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.p.stdout:
            self.q.put(line)
        self.q.put(None)

    def send(self, line):
        try:
            self.p.stdin.write(line + "\n")
            self.p.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def read(self, timeout):
        """The next JSON line, or None (timeout, exit, not JSON)."""
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.q.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                return None
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                if time.monotonic() > end:
                    return None

    def stop(self):
        self.send("quit")
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="results folder")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--workloads", default="", help="comma-separated (default: all of suite.py)")
    p.add_argument("--policies", default=None,
                   help="comma-separated policies of ours (default: all but native, from cachealloc)")
    p.add_argument("--limit-gib", type=float, default=6.0, help="the memory limit (GiB)")
    p.add_argument("--budget", type=float, default=480, help="seconds for everything")
    p.add_argument("--timing-share", type=float, default=0.35, help="share of the budget kept for timing")
    p.add_argument("--steps", type=int, default=6, help="steps per memory probe")
    p.add_argument("--jobs", type=int, default=8, help="probe processes at once at most")
    p.add_argument("--width", type=int, default=3, help="probes per search round")
    p.add_argument("--rel-res", type=float, default=0.005, help="search resolution (fraction of the size)")
    p.add_argument("--probe-timeout", type=float, default=120)
    p.add_argument("--advise-threads", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5, help="timing rounds (>= 5 for the issue's figures)")
    p.add_argument("--round-steps", type=int, default=3, help="steps per timing round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before the rounds")
    p.add_argument("--no-timing", action="store_true")
    p.add_argument("--no-open", action="store_true", help="skip the peaks at the physical size without the limit")
    p.add_argument("--reuse", default="",
                   help="comma-separated strand.json files of earlier runs: their native measurements "
                        "stand in for this run's (only our policies are searched)")
    return p.parse_args(argv)


def main(argv=None):
    a = parse(argv)
    d = Driver(a)
    try:
        d.main()
    finally:
        d.save()
    print((d.out / "strand.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
