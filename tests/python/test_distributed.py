"""Many ranks, one picture: each rank writes its snapshot into the run
directory (rank_files' names), gather_stats collects every rank's stats on
rank 0 over a gloo process group, and the report merges the ranks. World
sizes 2 to 4 through torch.multiprocessing, on the simulated backend."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

# As conftest.py finds them (not imported from it: pytest may have loaded
# tests/gpu's conftest under that name).
REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("CACHEALLOC_BUILD", REPO / "build"))

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

MIB = 1 << 20


def _activations(rank):
    """The rank's peak: rank r holds (r + 1) * 8 blocks of 4 MiB at once."""
    import cachealloc

    held = []
    for _ in range((rank + 1) * 8):  # a loop, not a comprehension: one frame, this one
        held.append(cachealloc._malloc(4 * MIB))
    return held


def _small_churn():
    import cachealloc

    for _ in range(50):
        cachealloc._free(cachealloc._malloc(4096))


def _rank_main(rank, world, init_file, run_dir, library):
    os.environ["CACHEALLOC_LIBRARY"] = library
    os.environ["RANK"] = str(rank)
    import cachealloc
    import cachealloc.distributed

    cachealloc.install(backend="simulated:8589934592", snapshot_dir=run_dir)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        _small_churn()
        held = _activations(rank)
        for p in held:
            cachealloc._free(p)
        cachealloc.distributed.write_snapshot()  # on demand: snapshot-api-0001
        gathered = cachealloc.distributed.gather_stats(0)
        own = dict(cachealloc.memory_stats(0))
        pathlib.Path(run_dir, f"own-{rank}.json").write_text(json.dumps(own))
        if rank == 0:
            pathlib.Path(run_dir, "gathered.json").write_text(json.dumps(gathered))
        else:
            assert gathered is None
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # The end-of-run snapshot is written at exit (atexit).


def _library():
    return os.environ.get("CACHEALLOC_LIBRARY", str(BUILD / "bindings" / "libcachealloc.so"))


@pytest.fixture(scope="module", params=[2, 3, 4])
def run(request, tmp_path_factory):
    world = request.param
    base = tmp_path_factory.mktemp(f"world{world}")
    run_dir = base / "run"
    mp.spawn(_rank_main, args=(world, str(base / "rendezvous"), str(run_dir), _library()),
             nprocs=world, join=True)
    return world, run_dir


def test_every_rank_writes_its_own_folder_at_exit_and_on_demand(run):
    world, run_dir = run
    from cachealloc import rank_files

    assert sorted(rank_files.ranks_in(run_dir)) == list(range(world))
    for rank in range(world):
        assert rank_files.snapshot_path(run_dir, rank, "end").is_file()
        assert rank_files.snapshot_path(run_dir, rank, "api", 1).is_file()
        stats = json.loads(rank_files.stats_path(run_dir, rank).read_text())
        assert stats["rank"] == rank


def test_gather_stats_brings_every_ranks_stats_to_rank_0(run):
    world, run_dir = run
    gathered = json.loads((run_dir / "gathered.json").read_text())
    assert [g["rank"] for g in gathered] == list(range(world))
    for g in gathered:
        own = json.loads((run_dir / f"own-{g['rank']}.json").read_text())
        assert g["stats"]["allocated_bytes.all.peak"] == own["allocated_bytes.all.peak"]
        assert g["stats"]["reserved_bytes.all.peak"] == own["reserved_bytes.all.peak"]
    peaks = [g["stats"]["allocated_bytes.all.peak"] for g in gathered]
    assert peaks == sorted(peaks) and peaks[0] < peaks[-1]  # rank r holds (r + 1) * 32 MiB


def test_merge_finds_each_ranks_peak_its_time_and_its_site(run):
    world, run_dir = run
    from cachealloc.report import merge_ranks

    ranks = merge_ranks(run_dir, jobs=2)
    assert [r["rank"] for r in ranks] == list(range(world))
    for r in ranks:
        own = json.loads((run_dir / f"own-{r['rank']}.json").read_text())
        assert r["peak_allocated"] == own["allocated_bytes.all.peak"]
        assert r["peak_reserved"] == own["reserved_bytes.all.peak"]
        # The history saw the whole run: its peak is the stats' peak.
        assert r["trace_peak_allocated"] == own["allocated_bytes.all.peak"]
        top = r["sites_at_peak"][0]
        assert "_activations" in top["site"], r["sites_at_peak"]
        assert top["bytes"] == (r["rank"] + 1) * 8 * 4 * MIB
        assert top["blocks"] == (r["rank"] + 1) * 8
        assert r["peak_time_us"] is not None and r["peak_event"] >= 0


def test_report_command_leads_with_the_highest_rank_and_advises_for_it(run, tmp_path):
    world, run_dir = run
    page = tmp_path / "report.html"
    env = dict(os.environ, CACHEALLOC_LIBRARY=_library(),
               PYTHONPATH=str(REPO / "bindings" / "python"),
               CACHEALLOC_CLI=str(BUILD / "tools" / "cachealloc"))
    out = subprocess.run([sys.executable, "-m", "cachealloc.cli", "report", str(run_dir),
                          "--html", str(page), "--advise-ranks", "2", "--jobs", "2"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert first.startswith(f"Rank {world - 1} peaks highest"), out.stdout
    assert "Advised PYTORCH_CUDA_ALLOC_CONF=" in out.stdout
    text = page.read_text()
    assert text.index(f"Rank {world - 1} peaks highest") < text.index("<table>")
    assert text.count("<tr") == world + 1  # the header and a row per rank


def test_report_run_reads_every_rank_as_a_dict(run):
    world, run_dir = run
    from cachealloc import report

    result = report.report_run(run_dir, advise_ranks=0, jobs=1)
    assert [r["rank"] for r in result["ranks"]] == list(range(world))
    assert result["advice"] is None


def test_report_refuses_a_directory_without_ranks(tmp_path):
    from cachealloc.report.command import main

    assert main([str(tmp_path)]) == 2
    assert main([str(tmp_path / "missing")]) == 2


def test_gather_stats_without_a_process_group_says_so():
    import cachealloc.distributed

    with pytest.raises(RuntimeError, match="no torch.distributed process group"):
        cachealloc.distributed.gather_stats()


def test_rank_file_names_refuse_bad_ranks_and_kinds(tmp_path):
    from cachealloc import rank_files

    assert rank_files.snapshot_path(tmp_path, 3, "oom", 2).name == "snapshot-oom-0002.pickle"
    assert rank_files.rank_dir(tmp_path, 12).name == "rank-00012"
    with pytest.raises(ValueError):
        rank_files.rank_dir(tmp_path, -1)
    with pytest.raises(ValueError):
        rank_files.snapshot_path(tmp_path, 0, "other")
    with pytest.raises(ValueError):
        rank_files.snapshot_path(tmp_path, 0, "api")  # needs a sequence number


def test_a_launcher_that_never_allocated_leaves_rank_0s_files_alone(tmp_path):
    """torchrun's launcher inherits the run directory but has no $RANK and no
    device memory: at exit it must not replace rank 0's files (seen on two
    H200s: rank-00000/memory_stats.json held {"devices": {}})."""
    from cachealloc import rank_files

    run_dir = tmp_path / "run"
    env = dict(os.environ, CACHEALLOC_LIBRARY=_library(), PYTHONPATH=str(REPO / "bindings" / "python"))
    env.pop("RANK", None)
    rank0 = ("import cachealloc; cachealloc.install(backend='simulated:1073741824', snapshot_dir={d!r}); "
             "p = cachealloc._malloc(1 << 20); cachealloc._free(p)").format(d=str(run_dir))
    subprocess.run([sys.executable, "-c", rank0], env=dict(env, RANK="0"), check=True, timeout=120)
    written = json.loads(rank_files.stats_path(run_dir, 0).read_text())
    assert written["devices"], written
    launcher = ("import cachealloc; cachealloc.install(backend='simulated:1073741824', "
                "snapshot_dir={d!r})").format(d=str(run_dir))
    subprocess.run([sys.executable, "-c", launcher], env=env, check=True, timeout=120)
    assert json.loads(rank_files.stats_path(run_dir, 0).read_text()) == written
