"""The strand driver's process pool (benchmarks/strand/pool.py): a child's
result, crash or timeout; the memory budget and the job count bound what
runs at once; priorities order what waits; past the deadline nothing new
starts."""
import json
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks" / "strand"))

import pool  # noqa: E402

PY = sys.executable


def job(tag, sleep=0.3):
    code = (f"import json, time; t0 = time.time(); time.sleep({sleep}); "
            f"print('noise'); print(json.dumps({{'outcome': 'ok', 'tag': {tag!r}, 't0': t0, 't1': time.time()}}))")
    return [PY, "-c", code]


def test_run_child_outcomes():
    assert pool.run_child(job("a", 0), 30)["tag"] == "a"
    out = pool.run_child([PY, "-c", "import sys; print('x', file=sys.stderr); sys.exit(3)"], 30)
    assert out["outcome"] == "error" and "exit status 3" in out["message"] and "x" in out["stderr"]
    out = pool.run_child([PY, "-c", "import time; time.sleep(30)"], 1)
    assert out["outcome"] == "error" and "timed out after 1 s" in out["message"]
    # A result line that says ok but a failing exit status is an error.
    out = pool.run_child([PY, "-c", "print('{\"outcome\": \"ok\"}'); raise SystemExit(1)"], 30)
    assert out["outcome"] == "error"


def overlap(results):
    events = sorted([(r["t0"], 1) for r in results] + [(r["t1"], -1) for r in results])
    most = cur = 0
    for _, d in events:
        cur += d
        most = max(most, cur)
    return most


def test_memory_budget_and_count():
    p = pool.Pool(mem_budget=10, max_jobs=3)
    try:
        # 4 units each in a budget of 10: at most 2 at once, though 3 are allowed.
        outs = p.run_many([job(i) for i in range(6)], mem=4, timeout=60)
        assert all(o["outcome"] == "ok" for o in outs)
        assert overlap(outs) <= 2
        # A job larger than the budget still runs, alone.
        big = p.submit(job("big", 0.1), mem=50, timeout=60).result()
        assert big["outcome"] == "ok"
    finally:
        p.close()


def test_priorities():
    p = pool.Pool(mem_budget=1, max_jobs=1)
    try:
        first = p.submit(job("first", 0.5), mem=1, timeout=60)  # runs now, the others wait
        time.sleep(0.1)
        late = p.submit(job("low", 0.0), mem=1, timeout=60, priority=5)
        early = p.submit(job("high", 0.0), mem=1, timeout=60, priority=1)
        r = [f.result() for f in (first, late, early)]
        assert r[2]["t0"] < r[1]["t0"]  # priority 1 ran before priority 5
    finally:
        p.close()


def test_deadline_skips_waiting_jobs():
    p = pool.Pool(mem_budget=1, max_jobs=1, deadline=time.monotonic() + 0.5)
    try:
        futs = [p.submit(job(i, 1.0), mem=1, timeout=60) for i in range(3)]
        outs = [f.result() for f in futs]
        assert outs[0]["outcome"] == "ok"
        assert [o["outcome"] for o in outs[1:]] == ["skipped", "skipped"]
        assert json.dumps(outs)  # results stay plain data
    finally:
        p.close()
