import random, sys
import cachealloc as ca
from cachealloc.profiler import MemoryProfiler
ca.init("", "simulated:8589934592")
prof = MemoryProfiler(device=0)
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
live = []
stack = []  # (cm, scope, model)
bad = 0
def cur():
    s = ca.memory_stats(0)
    return s["allocated_bytes.all.current"], s["reserved_bytes.all.current"]
def touch(alloc_delta_bytes=0, is_alloc=None):
    a, r = cur()
    for i, (cm, sc, m) in enumerate(stack):
        m["peak"] = max(m["peak"], a); m["peak_r"] = max(m["peak_r"], r)
        if is_alloc is True: m["ba"] += alloc_delta_bytes; m["na"] += 1
        if is_alloc is False: m["bf"] += alloc_delta_bytes; m["nf"] += 1
    if stack:
        m = stack[-1][2]
        m["speak"] = max(m["speak"], a); m["speak_r"] = max(m["speak_r"], r)
        if is_alloc is True: m["sba"] += alloc_delta_bytes
        if is_alloc is False: m["sbf"] += alloc_delta_bytes
for step in range(4000):
    op = rng.random()
    if op < 0.35:
        size = rng.choice([rng.randint(1, 4096), rng.randint(1, 4 << 20), rng.randint(1, 64 << 20)])
        a0 = cur()[0]
        p = ca._malloc(size); live.append(p)
        touch(cur()[0] - a0, True)
    elif op < 0.65 and live:
        p = live.pop(rng.randrange(len(live)))
        a0 = cur()[0]
        ca._free(p)
        touch(a0 - cur()[0], False)
    elif op < 0.80 and len(stack) < 6:
        cm = prof.profile_context(f"s{len(stack)}")
        sc = cm.__enter__()
        a, r = cur()
        stack.append((cm, sc, dict(start=a, peak=a, speak=a, peak_r=r, speak_r=r, ba=0, bf=0, sba=0, sbf=0, na=0, nf=0)))
    elif op < 0.95 and stack:
        cm, sc, m = stack.pop()
        cm.__exit__(None, None, None)
        if stack:
            a, r = cur(); pm = stack[-1][2]
            pm["speak"] = max(pm["speak"], a); pm["speak_r"] = max(pm["speak_r"], r)
        res = sc.result
        got = dict(peak=res.peak_allocated, speak=res.self_peak_allocated, peak_r=res.peak_reserved,
                   speak_r=res.self_peak_reserved, ba=res.bytes_allocated, bf=res.bytes_freed,
                   sba=res.self_bytes_allocated, sbf=res.self_bytes_freed, na=res.allocations, nf=res.frees,
                   start=res.before.allocated)
        for k, v in got.items():
            if m[k] != v:
                bad += 1
                if bad < 10: print("MISMATCH", step, sc.name, k, "expected", m[k], "got", v)
    elif op < 1.0:
        ca.empty_cache(); touch()
print("done, mismatches:", bad)
