"""`cachealloc report` on 512 synthetic ranks of 100,000 events each.

Target (issue 34): a page of at most 5 MB in at most 10 minutes on 2 cores.

Each rank's snapshot comes from a real run of the allocator on the simulated
backend (plain mode, history recording 100,000 events, Python frames):
a training-like loop of parameters, activations that grow then shrink, and
small temporaries, sized per variant. VARIANTS distinct runs are made (in
parallel) and copied to the 512 rank folders with their memory_stats.json,
so ranks differ in their peaks and sites as real ranks do, while generating
them stays cheap (the rank files are hard links to the variants' files;
every rank's file is still read and parsed by the report). Then the report is timed: the parallel streamed merge of
all ranks, the advisor on the 8 highest ranks, and the HTML page.

    python3 benchmarks/many_ranks_report.py [--ranks 512] [--events 100000]
        [--variants 16] [--jobs 2] [--dir DIR] [--keep] [--reuse]
        [--generate-only]
Needs a built library (build/bindings/libcachealloc.so or
$CACHEALLOC_LIBRARY) and tool (build/tools/cachealloc or $CACHEALLOC_CLI).
"""
import argparse
import multiprocessing
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bindings" / "python"))
MIB = 1 << 20


def _setup_env():
    os.environ.setdefault("CACHEALLOC_LIBRARY", str(REPO / "build" / "bindings" / "libcachealloc.so"))
    os.environ.setdefault("CACHEALLOC_CLI", str(REPO / "build" / "tools" / "cachealloc"))


def _parameters(rng, scale):
    import cachealloc

    held = []
    for _ in range(40):
        held.append(cachealloc._malloc(int(rng.randint(1, 24) * MIB * scale)))
    return held


def _forward(rng, scale, layers):
    import cachealloc

    acts = []
    for _ in range(layers):
        acts.append(cachealloc._malloc(int(rng.randint(1, 16) * MIB * scale) + rng.randint(0, 4095)))
        t = cachealloc._malloc(rng.randint(512, 256 * 1024))
        cachealloc._free(t)
    return acts


def _backward(acts, rng):
    import cachealloc

    for p in reversed(acts):
        g = cachealloc._malloc(rng.randint(512, 2 * MIB))
        cachealloc._free(p)
        cachealloc._free(g)


def make_variant(args):
    """One rank's run into variant_dir (as rank `variant`): events in history."""
    variant, variants_dir, events = args
    _setup_env()
    os.environ["RANK"] = str(variant)
    os.environ["CACHEALLOC_SNAPSHOT_ENTRIES"] = str(events)
    import cachealloc
    import cachealloc.distributed

    cachealloc.install(backend="simulated:85899345920", snapshot_dir=variants_dir)
    rng = random.Random(variant)
    scale = 1.0 + variant / 8
    params = _parameters(rng, scale)
    produced = 0
    while produced < events * 1.05:  # a little more than the ring holds: it is full
        acts = _forward(rng, scale, layers=24 + variant % 8)
        _backward(acts, rng)
        produced += len(acts) * 7  # 1 + 2 events per allocation and free, 7 per layer
    for p in params:
        cachealloc._free(p)
    cachealloc.distributed.write_snapshot("end")
    return variant


def generate(run_dir: pathlib.Path, ranks: int, events: int, variants: int, jobs: int) -> float:
    start = time.monotonic()
    variants_dir = run_dir.parent / "variants"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(jobs, maxtasksperchild=1) as pool:
        list(pool.imap_unordered(make_variant, [(v, str(variants_dir), events)
                                                for v in range(variants)]))
    from cachealloc import rank_files

    for rank in range(ranks):
        src = rank_files.rank_dir(variants_dir, rank % variants)
        dst = rank_files.rank_dir(run_dir, rank)
        dst.mkdir(parents=True)
        for name in ("snapshot-end.pickle", rank_files.STATS_FILE):
            _link_or_copy(src / name, dst / name)
    return time.monotonic() - start


def _link_or_copy(src: pathlib.Path, dst: pathlib.Path) -> None:
    """A hard link (512 copies of 20 MB snapshots would write 10 GB; the
    report reads and parses each rank's file all the same), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--variants", type=int, default=16)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--dir", help="where to put the run (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the generated run")
    ap.add_argument("--reuse", action="store_true",
                    help="time the report over the run already in --dir (kept by --keep) "
                         "instead of generating it again")
    ap.add_argument("--generate-only", action="store_true",
                    help="generate the run (with --dir and --keep) and stop: time it later, "
                         "on a quiet machine, with --reuse")
    ns = ap.parse_args()
    _setup_env()
    base = pathlib.Path(ns.dir or tempfile.mkdtemp(prefix="cachealloc-ranks-"))
    run_dir = base / "run"
    try:
        if ns.reuse and run_dir.is_dir():
            took = 0.0
            print(f"reusing the run in {run_dir}")
        else:
            took = generate(run_dir, ns.ranks, ns.events, ns.variants, ns.jobs)
        size = sum(f.stat().st_size for f in run_dir.rglob("*.pickle"))
        print(f"generated {ns.ranks} ranks ({ns.variants} variants) of {ns.events:,} events: "
              f"{size / 2**30:.2f} GiB of snapshots in {took:.0f} s")
        if ns.generate_only:
            return
        from cachealloc.report import report

        page = base / "report.html"
        import resource

        def cpu():
            return sum(getattr(resource.getrusage(who), f) for who in
                       (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))

        cpu_start = cpu()
        start = time.monotonic()
        with open(os.devnull, "w") as quiet:
            result = report(run_dir, html=page, advise_ranks=8, jobs=ns.jobs, out=quiet)
        took = time.monotonic() - start
        cpu_took = cpu() - cpu_start
        events = {r["events"] for r in result["ranks"]}
        page_bytes = page.stat().st_size
        advice = result["advice"] or {}
        print(f"report: {len(result['ranks'])} ranks, events per rank {sorted(events)}, "
              f"merge {result['merge_seconds']:.1f} s, advisor on ranks {advice.get('ranks')} "
              f"{advice.get('seconds', 0):.1f} s")
        print(f"page {page_bytes:,} bytes (target <= 5,000,000): "
              f"{'met' if page_bytes <= 5_000_000 else 'NOT met'}")
        print(f"time {took:.1f} s on {ns.jobs} workers (target <= 600 s): "
              f"{'met' if took <= 600 else 'NOT met'}")
        print(f"CPU time {cpu_took:.0f} s (workers and advisor processes included): on {ns.jobs} "
              f"cores of its own the report needs about {cpu_took / ns.jobs:.0f} s; load average "
              f"during the run {os.getloadavg()[0]:.1f}")
        print(f"advised: {advice.get('recommendation')!r} worst rank {advice.get('worst_rank')} "
              f"needs {advice.get('worst_min_memory')}")
    finally:
        if not ns.keep:
            shutil.rmtree(run_dir.parent / "variants", ignore_errors=True)
            shutil.rmtree(run_dir, ignore_errors=True)
        if not ns.keep and not ns.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
