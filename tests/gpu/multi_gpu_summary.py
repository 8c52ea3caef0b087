"""Summary of multi_gpu_suite.sh's runs: per mode and rank, every
memory_stats key of cachealloc's runs against native's run-to-run range,
losses, and step time as a ratio to native; the NCCL user-buffer checks.

    python tests/gpu/multi_gpu_summary.py RESULTS_DIR   (prints; writes summary.json)
"""
import json
import pathlib
import random
import statistics
import sys

WARM_UP = 3  # steps left out of step time (allocation and NCCL set-up)


def runs(folder):
    """{run: {rank: result}} for folder/RUN/rank-N.json."""
    out = {}
    for run in sorted(p for p in folder.glob("*") if p.is_dir()):
        ranks = {int(f.stem.split("-")[1]): json.loads(f.read_text()) for f in run.glob("rank-*.json")}
        if ranks:
            out[run.name] = ranks
    return out


def compare(native, ours):
    ranks = sorted(set().union(*[r.keys() for r in native.values()]))
    result = {}
    for rank in ranks:
        n_runs = [r[rank] for r in native.values() if rank in r]
        o_runs = [r[rank] for r in ours.values() if rank in r]
        keys = n_runs[0]["memory_stats"].keys()
        outside, unstable = {}, []
        for k in keys:
            lo = min(r["memory_stats"][k] for r in n_runs)
            hi = max(r["memory_stats"][k] for r in n_runs)
            if lo != hi:
                unstable.append(k)
            bad = [r["memory_stats"].get(k) for r in o_runs
                   if not lo <= r["memory_stats"].get(k, lo - 1) <= hi]
            if bad:
                outside[k] = {"native": [lo, hi], "cachealloc": bad}
        step = lambda rs: statistics.median(t for r in rs for t in r["step_seconds"][WARM_UP:])
        loss_spread = max(abs(a - b) for r in n_runs for a, b in zip(r["losses"], n_runs[0]["losses"]))
        loss_diff = max(abs(a - b) for r in o_runs for a, b in zip(r["losses"], n_runs[0]["losses"]))
        result[rank] = {
            "native_runs": len(n_runs), "cachealloc_runs": len(o_runs),
            "peak_reserved": {"native": sorted({r["memory_stats"]["reserved_bytes.all.peak"] for r in n_runs}),
                              "cachealloc": [r["memory_stats"]["reserved_bytes.all.peak"] for r in o_runs]},
            "peak_allocated": {"native": sorted({r["memory_stats"]["allocated_bytes.all.peak"] for r in n_runs}),
                               "cachealloc": [r["memory_stats"]["allocated_bytes.all.peak"] for r in o_runs]},
            "keys_outside_native_range": outside, "keys_native_unstable": unstable,
            "loss_native_spread": loss_spread, "loss_max_diff_to_native": loss_diff,
            "step_ms": {"native": step(n_runs) * 1e3, "cachealloc": step(o_runs) * 1e3},
            "step_ratio": step(o_runs) / step(n_runs),
        }
    return result


def pooled(native, ours):
    """Every rank's keys against native's range over ALL ranks and runs.

    The ranks of these runs are alike (same model, same per-rank batch,
    equal shards), so a race that lifts one rank's figure in one run (DDP's
    broadcast, NCCL's release timing) can land on any rank: a few runs per
    rank sample native's spread thinly, the pooled runs less so. Reported
    beside the per-rank comparison, not instead of it. `worst` is the
    largest distance outside the pooled range, relative to the range's
    nearer end."""
    n_all = [r["memory_stats"] for run in native.values() for r in run.values()]
    o_all = [r["memory_stats"] for run in ours.values() for r in run.values()]
    native_range = ranges(n_all)
    outside = keys_outside(o_all, native_range)
    worst = 0.0
    for k in outside:
        lo, hi = native_range[k]
        for v in (s[k] for s in o_all if k in s and not lo <= s[k] <= hi):
            end = lo if v < lo else hi
            worst = max(worst, abs(v - end) / max(abs(end), 1))
    # The other direction: native's rank-runs against cachealloc's pooled
    # range. Two samples of one distribution each leave some of the other's
    # values outside their range (a fresh value falls outside n samples'
    # range with probability 2 / (n + 1)), so a key outside in one direction
    # says little alone; a key outside in one direction only, with a low
    # permutation p, would be a real difference.
    reverse = sorted(keys_outside(n_all, ranges(o_all)))
    tests = {k: permutation_p([s[k] for s in n_all], [s.get(k, 0) for s in o_all])
             for k in sorted(outside)}
    return {"native_samples": len(n_all), "cachealloc_samples": len(o_all),
            "keys_outside": sorted(outside), "worst_relative": worst,
            "native_leave_one_run_out": leave_one_run_out(native),
            "native_keys_outside_cachealloc_range": reverse,
            "permutation_p_of_keys_outside": tests}


def ranges(samples):
    """{key: (lowest, highest)} over memory_stats dicts (the first one's
    keys; a key a sample lacks counts as 0)."""
    return {k: (min(s.get(k, 0) for s in samples), max(s.get(k, 0) for s in samples))
            for k in samples[0]}


def keys_outside(samples, key_ranges):
    """Keys on which some sample lies outside key_ranges (a missing key is
    outside)."""
    return {k for s in samples for k, (lo, hi) in key_ranges.items()
            if k not in s or not lo <= s[k] <= hi}


def leave_one_run_out(native):
    """Keys on which one of native's own runs (all its ranks) falls outside
    the pooled range of native's other runs: how far "inside native's
    range" holds for native itself. Needs at least 2 runs."""
    if len(native) < 2:
        return []
    keys = set()
    for held in native:
        rest = [r["memory_stats"] for run, rr in native.items() if run != held for r in rr.values()]
        keys |= keys_outside([r["memory_stats"] for r in native[held].values()], ranges(rest))
    return sorted(keys)


def permutation_p(a, b, rounds=20000, seed=1):
    """Two-sided permutation test of equal means (the null: native's and
    cachealloc's rank-runs come from one distribution). Exact in the limit
    of rounds; a fixed seed makes the printed p reproducible."""
    rng = random.Random(seed)
    both, n = list(a) + list(b), len(a)
    observed = abs(statistics.fmean(a) - statistics.fmean(b))
    if observed == 0:
        return 1.0
    hits = 0
    for _ in range(rounds):
        rng.shuffle(both)
        if abs(statistics.fmean(both[:n]) - statistics.fmean(both[n:])) >= observed - 1e-12 * observed:
            hits += 1
    return (hits + 1) / (rounds + 1)


def main():
    root = pathlib.Path(sys.argv[1])
    summary = {}
    for mode_dir in sorted(p for p in root.glob("*") if (p / "native").is_dir() and (p / "cachealloc").is_dir()):
        native, ours = runs(mode_dir / "native"), runs(mode_dir / "cachealloc")
        if not native or not ours:
            print(f"{mode_dir.name}: missing runs (native {len(native)}, cachealloc {len(ours)})")
            continue
        summary[mode_dir.name] = compare(native, ours)
        pool = pooled(native, ours)
        summary[mode_dir.name + "_pooled_over_ranks"] = pool
        for rank, r in summary[mode_dir.name].items():
            print(f"{mode_dir.name} rank {rank}: runs {r['native_runs']}+{r['cachealloc_runs']}; "
                  f"peak reserved native {r['peak_reserved']['native']} cachealloc "
                  f"{r['peak_reserved']['cachealloc']}; peak allocated native "
                  f"{r['peak_allocated']['native']} cachealloc {r['peak_allocated']['cachealloc']}; "
                  f"keys outside native's range {len(r['keys_outside_native_range'])} "
                  f"(native unstable {len(r['keys_native_unstable'])}); step "
                  f"{r['step_ms']['native']:.1f} / {r['step_ms']['cachealloc']:.1f} ms ratio "
                  f"{r['step_ratio']:.3f}; loss diff {r['loss_max_diff_to_native']:.4f} "
                  f"(native spread {r['loss_native_spread']:.4f})")
        print(f"{mode_dir.name} all ranks pooled: native {pool['native_samples']} rank-runs, "
              f"cachealloc {pool['cachealloc_samples']}; keys outside native's pooled range "
              f"{len(pool['keys_outside'])} {pool['keys_outside'][:6]}; worst "
              f"{pool['worst_relative']:.2e} of the range's end")
        ps = pool["permutation_p_of_keys_outside"]
        if ps:
            print(f"{mode_dir.name} those keys, permutation p (same distribution as native's): "
                  + ", ".join(f"{k} {p:.3f}" for k, p in ps.items()))
        print(f"{mode_dir.name} native itself, one run left out against its other runs: "
              f"{len(pool['native_leave_one_run_out'])} keys outside")
        print(f"{mode_dir.name} native's rank-runs outside cachealloc's pooled range: "
              f"{len(pool['native_keys_outside_cachealloc_range'])} keys "
              f"{pool['native_keys_outside_cachealloc_range'][:6]}")
    for a in ("native", "cachealloc"):
        f = root / f"user_buffer_{a}.json"
        if f.exists():
            data = json.loads(f.read_text())
            summary[f"user_buffer_{a}"] = data
            for rank, results in enumerate(data["ranks"]):
                for r in results:
                    print(f"user buffers {a} rank {rank} {r['setting']}: "
                          f"allreduce_ok {r.get('allreduce_ok')} pool segments (n, bytes, expandable) "
                          f"{r.get('pool_segments')} default {r.get('default_segments')}")
        else:
            print(f"user buffers {a}: no result")
    (root / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
