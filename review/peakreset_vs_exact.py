import random, sys, types
import cachealloc as ca
from cachealloc.profiler_scopes import ExactScopes, PeakResetScopes
ca.init("", "simulated:8589934592")
fake = types.SimpleNamespace(memory_stats=lambda d: ca.memory_stats(d),
                             reset_peak_memory_stats=lambda d: ca.reset_peak_memory_stats(d))
ex, pr = ExactScopes(0), PeakResetScopes(0, cuda=fake)
rng = random.Random(int(sys.argv[1]))
live, stack, bad = [], [], 0
for step in range(5000):
    op = rng.random()
    if op < 0.4:
        live.append(ca._malloc(rng.choice([rng.randint(1, 4096), rng.randint(1, 8 << 20)])))
    elif op < 0.7 and live:
        ca._free(live.pop(rng.randrange(len(live))))
    elif op < 0.85 and len(stack) < 5:
        stack.append((ex.open(), pr.open()))
    elif stack:
        te, tp = stack.pop()
        a, b = ex.close(te), pr.close(tp)
        for k in a:
            if a[k] != b[k]:
                bad += 1
                if bad < 8: print("step", step, k, "exact", a[k], "peak-reset", b[k])
print("mismatches", bad)
