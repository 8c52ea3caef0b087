"""The OOM flight recorder (issue 35) on a GPU: GPT-2 small (bf16, AdamW,
sequence 1024, built from GPT2Config, nothing downloaded) under a 38 GiB
limit (set_per_process_memory_fraction(38 GiB / the card's memory)).

    python tests/gpu/oom_recorder_script.py [--out DIR]      # everything, ~2-3 min

runs, each in a fresh process (one per GPU at a time when there are two):
  A. native, classic settings, batch 26: runs out of memory; an OOM
     observer dumps native's own snapshot (history included);
  B. cachealloc with the recorder on (install(oom_snapshot=DIR)), batch 26:
     the OOM writes a snapshot, torch.cuda._memory_viz opens it, the
     message is native's text and then the diagnosis with a suggestion;
     then the program frees the failed step's memory and trains on
     (batch 8, two steps);
  C. a fresh process with the suggested PYTORCH_CUDA_ALLOC_CONF, batch 26;
  D. cachealloc, batch 28: the message says no setting fits, and by how much;
  E. `cachealloc explain` on native's dump from A.
It prints a compact summary and writes every result to DIR/oom_recorder.json.

    python tests/gpu/oom_recorder_script.py worker ...      # one process (internal)
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))
SEQUENCE = 1024
LIMIT = 38 << 30
# Native's message with every size a placeholder (as tests/python/test_oom_recorder.py).
SIZE = r"(?:\d+ bytes|\d+\.\d\d (?:KiB|MiB|GiB))"


def template(message):
    """The first line of an OOM message with every size and number blanked."""
    first = message.split("\n")[0]
    first = re.sub(SIZE, "<size>", first)
    return re.sub(r"(GPU|Process) \d+", r"\1 <n>", first)


def worker(args):
    if args.allocator == "native":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.conf
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    out = {"allocator": args.allocator, "conf": args.conf, "batch": args.batch}
    if args.allocator == "cachealloc":
        import cachealloc

        cachealloc.install(conf=args.conf, oom_snapshot=args.oom_snapshot)
        assert cachealloc.mode() == "torch-extension", cachealloc.mode()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(LIMIT / total, 0)
    out["total_memory"] = total
    # Python frames only: C++ frames are symbolized at every snapshot (slow).
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    if args.native_dump:
        def dump(device, alloc, device_allocated, device_free):
            torch.cuda.memory._dump_snapshot(args.native_dump)
        torch._C._cuda_attach_out_of_memory_observer(dump)

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).to(device="cuda", dtype=torch.bfloat16)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator(device="cuda").manual_seed(1)

    def steps(batch, n):
        losses = []
        for _ in range(n):
            ids = torch.randint(0, model.config.vocab_size, (batch, SEQUENCE), device="cuda",
                                generator=generator)
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss))
            del ids, loss
        torch.cuda.synchronize()
        return losses

    start = time.perf_counter()
    try:
        out["losses"] = steps(args.batch, args.steps)
        out["ok"] = True
    except torch.OutOfMemoryError as e:
        out["ok"] = False
        out["message"] = str(e)
        out["oom_seconds"] = time.perf_counter() - start
    if not out["ok"]:
        # Free the failed step's memory (its tensors died with the frames;
        # gradients go) and train on at a smaller batch.
        optimizer.zero_grad(set_to_none=True)
        if args.continue_batch:
            try:
                out["continued_losses"] = steps(args.continue_batch, 2)
            except torch.OutOfMemoryError as e:
                out["continued_error"] = str(e)[:300]
    stats = torch.cuda.memory_stats(0)
    out["peak_reserved"] = stats.get("reserved_bytes.all.peak", 0)
    out["num_ooms"] = stats.get("num_ooms", 0)
    if args.allocator == "cachealloc" and args.oom_snapshot:
        from cachealloc import oom_recorder

        rec = oom_recorder.recorder()
        out["snapshot"] = rec.last_path if rec else None
        out["snapshot_files"] = sorted(os.listdir(args.oom_snapshot))
        if out["snapshot"]:
            import pickle
            from torch.cuda import _memory_viz

            with open(out["snapshot"], "rb") as f:
                snap = pickle.load(f)
            html = _memory_viz.trace_plot(snap)
            seg = _memory_viz.segment_plot(snap)
            out["memory_viz_bytes"] = [len(html), len(seg)]
            out["snapshot_bytes"] = os.path.getsize(out["snapshot"])
    print(json.dumps(out))


def run_worker(gpu, allocator, batch, steps=3, conf="", oom_snapshot=None, native_dump=None,
               continue_batch=None):
    cmd = [sys.executable, __file__, "worker", allocator, "--batch", str(batch), "--steps",
           str(steps), "--conf", conf]
    if oom_snapshot:
        cmd += ["--oom-snapshot", str(oom_snapshot)]
    if native_dump:
        cmd += ["--native-dump", str(native_dump)]
    if continue_batch:
        cmd += ["--continue-batch", str(continue_batch)]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu), PYTHONPATH=os.pathsep.join(
        [str(ROOT / "bindings" / "python"), os.environ.get("PYTHONPATH", "")]))
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=200)
    if proc.returncode != 0:
        return {"error": f"rc {proc.returncode}: {proc.stderr[-3000:]}", "cmd": cmd}
    d = json.loads(proc.stdout.strip().splitlines()[-1])
    d["wall_seconds"] = round(time.perf_counter() - start, 1)
    return d


def gpus():
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [g for g in visible.split(",") if g.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    except (OSError, subprocess.SubprocessError):
        n = 1
    return [str(i) for i in range(max(1, n))]


def suggestion(message):
    m = re.search(r"Suggestion: PYTORCH_CUDA_ALLOC_CONF=(\S+)", message or "")
    return m.group(1) if m else None


def tool():
    from cachealloc.tool import tool_path

    return str(tool_path())


def run_all(out_dir):
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    snaps = out_dir / "oom_snapshots"
    native_dump = out_dir / "native_oom_dump.pickle"
    g = gpus()
    # The batches: the (26 runs out under classic settings, 28 is past
    # the physical limit) were measured with another GPT-2 set-up; on this
    # script's, an H200 trains 28 under classic settings at 38 GiB, so a run
    # can name its own (OOM_BATCH, NOFIT_BATCH).
    oom_b = int(os.environ.get("OOM_BATCH", 26))
    nofit_b = int(os.environ.get("NOFIT_BATCH", 28))
    r_batches = {"oom_batch": oom_b, "nofit_batch": nofit_b}
    pool = ThreadPoolExecutor(max_workers=min(2, len(g)))
    r = {"gpus": len(g), **r_batches}
    # Wave 1: A and B (and D when a second GPU is free).
    a = pool.submit(run_worker, g[0], "native", oom_b, native_dump=native_dump)
    b = pool.submit(run_worker, g[-1], "cachealloc", oom_b, oom_snapshot=snaps, continue_batch=8)
    r["A_native_b26"], r["B_cachealloc_b26"] = a.result(), b.result()
    conf = suggestion(r["B_cachealloc_b26"].get("message"))
    r["suggestion"] = conf
    c = pool.submit(run_worker, g[0], "cachealloc", oom_b, conf=conf) if conf else None
    d = pool.submit(run_worker, g[-1], "cachealloc", nofit_b, oom_snapshot=out_dir / "oom_b28")
    r["C_suggestion_b26"] = c.result() if c else {"error": "no suggestion in the message"}
    r["D_cachealloc_b28"] = d.result()
    if native_dump.exists():
        e = subprocess.run([tool(), "explain", str(native_dump), "--memory-limit", str(LIMIT)],
                           capture_output=True, text=True, timeout=120)
        r["E_explain_native"] = {"rc": e.returncode, "stdout": e.stdout, "stderr": e.stderr[-2000:]}
    else:
        r["E_explain_native"] = {"rc": None, "stderr": "native dumped no snapshot"}
    a_msg, b_msg = r["A_native_b26"].get("message"), r["B_cachealloc_b26"].get("message")
    r["native_prefix_equal"] = bool(a_msg and b_msg and template(a_msg) == template(b_msg))
    r["native_template"] = template(a_msg) if a_msg else None
    r["cachealloc_template"] = template(b_msg) if b_msg else None
    (out_dir / "oom_recorder.json").write_text(json.dumps(r, indent=1) + "\n")
    return r


def checks(r):
    """(name, passed, detail) for each claim of the issue."""
    a, b, c, d, e = (r.get(k, {}) for k in ("A_native_b26", "B_cachealloc_b26", "C_suggestion_b26",
                                             "D_cachealloc_b28", "E_explain_native"))
    bm, dm = b.get("message") or "", d.get("message") or ""
    return [
        ("native classic batch 26 runs out of memory", a.get("ok") is False, a.get("error", "")),
        ("cachealloc batch 26 runs out of memory", b.get("ok") is False, b.get("error", "")),
        ("message starts with native's text (same template)", r.get("native_prefix_equal"),
         f"{r.get('native_template')!r} vs {r.get('cachealloc_template')!r}"),
        ("message carries the diagnosis", "cachealloc diagnosis" in bm and "what-if" in bm, ""),
        ("the OOM wrote one snapshot", len(b.get("snapshot_files") or []) == 1, b.get("snapshot_files")),
        ("_memory_viz opens it", bool(b.get("memory_viz_bytes")), b.get("memory_viz_bytes")),
        ("training goes on after freeing memory", len(b.get("continued_losses") or []) == 2,
         b.get("continued_error", "")),
        ("the suggestion trains batch 26 in a fresh process", c.get("ok") is True,
         f"{r.get('suggestion')}: {c.get('error', '')}"),
        ("batch 28: no setting fits, and by how much", "no setting fits" in dm and " more;" in dm,
         d.get("error", "")),
        ("cachealloc explain on native's own OOM dump", e.get("rc") == 0 and
         "cachealloc diagnosis" in (e.get("stdout") or ""), e.get("stderr", "")),
    ]


def summary(r):
    lines = [f"OOM flight recorder on {r['gpus']} GPU(s), GPT-2 small bf16 AdamW seq 1024, 38 GiB limit:"]
    for name, ok, detail in checks(r):
        lines.append(f"  [{'ok' if ok else 'FAIL'}] {name}" + ("" if ok or not detail else f" ({detail})"))
    b = r.get("B_cachealloc_b26", {})
    if b.get("message"):
        lines.append("  cachealloc's message at batch 26 (time to OOM incl. recorder "
                     f"{b.get('oom_seconds', 0):.1f} s, snapshot {b.get('snapshot_bytes', 0)} bytes):")
        lines += ["    " + x for x in b["message"].split("\n")]
    d = r.get("D_cachealloc_b28", {})
    if d.get("message"):
        lines.append("  batch 28, diagnosis:")
        lines += ["    " + x for x in d["message"].split("\n")[1:]]
    e = r.get("E_explain_native", {})
    if e.get("stdout"):
        lines.append("  cachealloc explain on native's dump:")
        lines += ["    " + x for x in e["stdout"].splitlines()]
    return "\n".join(lines)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        p = argparse.ArgumentParser()
        p.add_argument("allocator", choices=["native", "cachealloc"])
        p.add_argument("--batch", type=int, required=True)
        p.add_argument("--steps", type=int, default=3)
        p.add_argument("--conf", default="")
        p.add_argument("--oom-snapshot", default=None)
        p.add_argument("--native-dump", default=None)
        p.add_argument("--continue-batch", type=int, default=None)
        worker(p.parse_args(sys.argv[2:]))
        return 0
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    args = p.parse_args()
    out = args.out or os.environ.get("OUT") or tempfile.mkdtemp(prefix="oom_recorder_")
    r = run_all(out)
    print(summary(r))
    return 0 if all(ok for _, ok, _ in checks(r)) else 1


if __name__ == "__main__":
    sys.exit(main())
