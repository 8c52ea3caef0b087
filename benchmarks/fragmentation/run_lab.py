#!/usr/bin/env python3
"""Runs the fragmentation lab over every reference trace and a few long
synthetic ones, and writes the results into docs/fragmentation.md.

    cmake -S . -B build -G Ninja -DCACHEALLOC_BUILD_BENCHMARKS=ON
    ninja -C build cachealloc synth_trace lab_speed
    python3 benchmarks/fragmentation/run_lab.py --build build

What it does (all on CPU, one core at a time):
  1. generates the synthetic traces into BUILD/traces/ unless present
     (synth_trace; >= 10 M events each; kept out of git with the build);
  2. `cachealloc compare --json` of every trace under CONFS (traces recorded
     under a memory fraction replay under that limit, as recorded);
  3. `cachealloc min-memory --json` of every trace under MIN_MEMORY_CONFS;
  4. `lab_speed` (lockstep and what-if replay throughput) on the synthetic
     traces and the longest reference traces;
  5. HTML reports for a few traces into BUILD/lab-reports/;
  6. replaces the text between the GENERATED markers of the output file with
     the tables and the commands that made them (the prose around stays).
"""
import argparse
import json
import math
import pathlib
import platform
import shlex
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFS = [
    "trace",
    "",
    "max_split_size_mb:128",
    "max_split_size_mb:128,max_non_split_rounding_mb:128",
    "roundup_power2_divisions:4",
    "expandable_segments:True",
]
MIN_MEMORY_CONFS = [
    "trace",
    "max_split_size_mb:128",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.6",
    "expandable_segments:True",
]
# (name prefix, workload, seed, recording config); the event count is appended.
SYNTHETIC = [
    ("synth_training", "training", 1, ""),
    ("synth_churn", "churn", 2, ""),
    ("synth_training_split256", "training", 3, "max_split_size_mb:256"),
]
HTML_REPORTS = ["transformer", "random", "oom_frac"]  # and the synthetic churn trace
BEGIN, END = "<!-- BEGIN GENERATED (run_lab.py) -->", "<!-- END GENERATED -->"
GiB = 1 << 30


def log(msg):
    print(f"[run_lab] {msg}", file=sys.stderr, flush=True)


def run_json(cmd):
    log(" ".join(map(str, cmd)))
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{proc.stderr}")
    return proc.stdout


def gib(n):
    return f"{n / GiB:.2f}"


def rel(value, base):
    if not base:
        return ""
    change = 100.0 * (value / base - 1.0)
    return "" if abs(change) < 0.05 else f" ({change:+.0f}%)"


def conf_name(conf):
    return {"": "defaults", "trace": "trace's own"}.get(conf, conf)


class Lab:
    def __init__(self, args):
        self.build = pathlib.Path(args.build).resolve()
        self.cli = self.build / "tools" / "cachealloc"
        self.synth = self.build / "benchmarks" / "fragmentation" / "synth_trace"
        self.speed_tool = self.build / "benchmarks" / "fragmentation" / "lab_speed"
        for tool in (self.cli, self.synth, self.speed_tool):
            if not tool.exists():
                raise SystemExit(f"{tool} not built: ninja -C {self.build} cachealloc synth_trace lab_speed")
        self.traces_dir = pathlib.Path(args.traces).resolve()
        self.events = args.events
        self.out = pathlib.Path(args.out)
        self.commands = []

    def note(self, cmd):
        """Keeps `cmd` for the docs, with paths relative to the repository."""
        def short(arg):
            text = str(arg).replace(str(self.build), "BUILD")
            text = text.replace(str(self.traces_dir), "../shared/traces")
            return text.replace(str(REPO) + "/", "")
        self.commands.append(shlex.join(short(c) for c in cmd))

    def traces(self):
        """(name, path, meta or None) for reference then synthetic traces."""
        out = []
        for p in sorted(self.traces_dir.glob("*.pickle.gz")):
            name = p.name[: -len(".pickle.gz")]
            meta = json.loads((self.traces_dir / f"{name}.json").read_text())
            out.append((name, p, meta))
        gen = self.build / "traces"
        gen.mkdir(exist_ok=True)
        count = f"{self.events // 1_000_000}M" if self.events % 1_000_000 == 0 else f"{self.events // 1000}k"
        for prefix, workload, seed, conf in SYNTHETIC:
            name = f"{prefix}_{count}"
            path = gen / f"{name}.pickle.gz"
            cmd = [self.synth, "--events", self.events, "--workload", workload, "--seed", seed,
                   "--out", path] + (["--conf", conf] if conf else [])
            self.note(cmd)
            if not path.exists():
                run_json(cmd)
            out.append((name, path, None))
        return out

    @staticmethod
    def limit_args(meta):
        if not meta or not meta.get("memory_fraction"):
            return []
        limit = math.floor(meta["memory_fraction"] * meta["device_total_memory"])
        return ["--memory-limit", limit, "--recorded-limit", limit]

    def compare(self, name, path, meta):
        cmd = [self.cli, "compare", "--json", path, *self.limit_args(meta)]
        for c in CONFS:
            cmd += ["--conf", c]
        if name in HTML_REPORTS or name.startswith("synth_churn_"):
            (self.build / "lab-reports").mkdir(exist_ok=True)
            cmd += ["--html", self.build / "lab-reports" / f"{name}.html"]
        self.note(cmd)
        return json.loads(run_json(cmd))

    def min_memory(self, path, meta):
        cmd = [self.cli, "min-memory", "--json", path, *self.limit_args(meta)[2:]]
        for c in MIN_MEMORY_CONFS:
            cmd += ["--conf", c]
        self.note(cmd)
        return json.loads(run_json(cmd))

    def lockstep_peak(self, path):
        """Reserved peak of a lockstep replay: the recorded run's, if it did not diverge."""
        cmd = [self.cli, "replay", "--json", path]
        self.note(cmd)
        out = json.loads(subprocess.run([str(c) for c in cmd], capture_output=True, text=True).stdout)
        return None if out["divergence"] else out["memory_stats"]["reserved_bytes.all.peak"]

    def speed(self, path, meta):
        limit = self.limit_args(meta)[:2]
        cmd = [self.speed_tool, "--repeat", 5, *limit, "--conf", "trace", "--conf", "expandable_segments:True", path]
        self.note(cmd)
        return [json.loads(line) for line in run_json(cmd).splitlines() if line.strip()]


def tables(lab, runs, minimums, speeds, lockstep_peaks, seconds):
    lines = [BEGIN, ""]
    lines.append(f"Generated by `benchmarks/fragmentation/run_lab.py` in {seconds / 60:.0f} min on "
                 f"{platform.machine()} ({platform.processor() or 'cpu'}), "
                 f"{time.strftime('%Y-%m-%d')}. Sizes in GiB (2^30 bytes). Traces marked * were "
                 "recorded under a memory fraction and replay under that limit.")
    lines.append("")

    lines.append("### The trace's own config reproduces the recording")
    lines.append("")
    lines.append("| trace | events | requests | empty_cache | recorded peak reserved (B) | replayed (B) | match |")
    lines.append("|---|---:|---:|---:|---:|---:|---|")
    for name, meta, out in runs:
        row = out["configs"][0]
        want = meta["final_memory_stats"]["reserved_bytes.all.peak"] if meta else lockstep_peaks.get(name)
        source = "" if meta else " (lockstep)"
        lines.append(f"| {name}{'*' if lab.limit_args(meta) else ''} | {out['events']:,} | {out['requests']:,} | "
                     f"{out['empty_cache_calls']} | {want}{source} | "
                     f"{row['peak_reserved']} | {'yes' if want == row['peak_reserved'] else 'NO'} |")
    lines.append("")
    lines.append("For the synthetic traces the recorded peak is the one `cachealloc replay` reproduces "
                 "in lockstep (no divergence: every address, segment and statistic as recorded).")
    lines.append("")

    def grid(title, key, fmt):
        lines.append(f"### {title}")
        lines.append("")
        lines.append("| trace | " + " | ".join(conf_name(c) for c in CONFS) + " |")
        lines.append("|---|" + "---:|" * len(CONFS))
        for name, meta, out in runs:
            base = out["configs"][0][key]
            cells = [fmt(r[key], base) for r in out["configs"]]
            lines.append(f"| {name}{'*' if lab.limit_args(meta) else ''} | " + " | ".join(cells) + " |")
        lines.append("")

    grid("Peak reserved (GiB; change vs the trace's own config)", "peak_reserved",
         lambda v, b: gib(v) + rel(v, b))
    grid("Fragmentation at the reserved peak (1 − allocated / reserved)", "fragmentation_at_peak",
         lambda v, b: f"{100 * v:.1f}%")
    grid("Device allocations (segments reserved; page mappings for expandable)", "device_allocs",
         lambda v, b: f"{v:,}")
    lines.append("OOMs under the recorded limit (oom_frac*, 61 recorded): " + ", ".join(
        f"{conf_name(r['conf'])} {r['ooms']}" for r in next(o for n, m, o in runs if n == "oom_frac")["configs"]) + ".")
    lines.append("")

    lines.append("### Smallest memory limit without an OOM (`cachealloc min-memory`, GiB; change vs the trace's own config)")
    lines.append("")
    lines.append("| trace | " + " | ".join(conf_name(c) for c in MIN_MEMORY_CONFS) + " | probes |")
    lines.append("|---|" + "---:|" * (len(MIN_MEMORY_CONFS) + 1))
    for name, out in minimums:
        base = out["configs"][0]["min_memory"]
        cells = [gib(r["min_memory"]) + rel(r["min_memory"], base) + ("†" if r["byte_refined"] else "")
                 for r in out["configs"]]
        probes = sum(r["probes"] for r in out["configs"])
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {probes} |")
    lines.append("")
    lines.append("† the 2 MiB-unit answer minus one byte ran clean (garbage collection's threshold is a "
                 "fraction of the exact limit), so the last unit was bisected byte by byte. Every answer "
                 "L was verified: L runs clean, L − 1 byte does not.")
    lines.append("")

    lines.append("### Replay speed (one core; best of 5; parsing and request extraction not timed)")
    lines.append("")
    lines.append("| trace | events | lockstep M events/s | what-if (trace config) M events/s | "
                 "M requests/s | what-if (expandable) M events/s |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for name, rows in speeds:
        lock = next(r for r in rows if r["mode"] == "lockstep")
        native = next(r for r in rows if r["mode"] == "whatif" and r["conf"] == "trace")
        exp = next(r for r in rows if r["mode"] == "whatif" and r["conf"] == "expandable_segments:True")
        lines.append(f"| {name} | {lock['events']:,} | {lock['events_per_cpu_s'] / 1e6:.2f}"
                     f"{' (diverged)' if lock['diverged'] else ''} | {native['events_per_cpu_s'] / 1e6:.2f} | "
                     f"{native['requests_per_cpu_s'] / 1e6:.2f} | {exp['events_per_cpu_s'] / 1e6:.2f} |")
    lines.append("")
    lines.append("Rates are per CPU-second of the replaying thread (the machine is shared; wall-clock "
                 "rates are in lab_speed's JSON output). An event is one recorded trace entry; the "
                 "what-if replay covers the same entries with fewer requests (a free_requested + "
                 "free_completed pair is one free; segment events are the engine's own).")
    lines.append("")
    reports = sorted(p.name for p in (lab.build / "lab-reports").glob("*.html"))
    lines.append("HTML reports: " + ", ".join(f"`BUILD/lab-reports/{n}`" for n in reports) + ".")
    lines.append("")
    lines.append("Commands (BUILD = the build directory):")
    lines.append("")
    lines.append("```")
    lines.extend(lab.commands)
    lines.append("```")
    lines.append("")
    lines.append(END)
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build", help="build directory (default: build)")
    parser.add_argument("--traces", default=str(REPO.parent / "shared" / "traces"),
                        help="reference traces (default: ../shared/traces)")
    parser.add_argument("--events", type=int, default=10_000_000,
                        help="events per synthetic trace (default 10000000)")
    parser.add_argument("--out", default=str(REPO / "docs" / "fragmentation.md"))
    args = parser.parse_args()
    lab = Lab(args)
    start = time.time()
    traces = lab.traces()
    runs, minimums, speeds = [], [], []
    for name, path, meta in traces:
        runs.append((name, meta, lab.compare(name, path, meta)))
    for name, path, meta in traces:
        minimums.append((name, lab.min_memory(path, meta)))
    longest = sorted((t for t in traces if t[2]), key=lambda t: -t[2]["n_events"])[:2]
    for name, path, meta in longest + [t for t in traces if not t[2]]:
        speeds.append((name, lab.speed(path, meta)))
    lockstep_peaks = {name: lab.lockstep_peak(path) for name, path, meta in traces if not meta}
    generated = tables(lab, runs, minimums, speeds, lockstep_peaks, time.time() - start)

    text = lab.out.read_text() if lab.out.exists() else f"# Fragmentation lab\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip() + f"\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    lab.out.write_text(head + generated + tail)
    log(f"wrote {lab.out}")


if __name__ == "__main__":
    main()
