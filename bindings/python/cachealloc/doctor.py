"""`cachealloc doctor`: what this machine gives cachealloc, checked the way
install() will use it, ending in one line: ready, or what to fix.

Checks, each printed as "name: finding": the package (library, tool), the
torch release and its CUDA, the PyTorch glue (which prebuilt or compiled
copy fits, loaded for real on a CUDA torch), the CUDA backends (the build's
and the runtime library it loads), the driver and its virtual memory
management (VMM: what expandable segments need; POSIX-fd and fabric handle
types: what sharing them between processes needs), and each GPU with its
memory. The driver is asked directly (libcuda.so.1 through ctypes), so a
missing runtime or torch does not hide it. Never installs cachealloc.
"""
from __future__ import annotations

import ctypes
import shutil
from typing import List, Optional, Tuple

from . import glue_build, torch_glue
from ._native import lib, library_path
from .tool import ToolNotFound, tool_path

# Device attributes from cuda.h's CUdevice_attribute.
_VMM_SUPPORTED = 102
_POSIX_FD_HANDLES = 103
_FABRIC_HANDLES = 128


class Report:
    """The findings so far, and the first thing that keeps the GPU out of reach."""

    def __init__(self) -> None:
        self.lines: List[str] = []
        self.fixes: List[str] = []

    def say(self, name: str, finding: str) -> None:
        self.lines.append(f"{name + ':':<16}{finding}")

    def fix(self, what: str) -> None:
        self.fixes.append(what)


def _driver(report: Report) -> List[dict]:
    """Asks libcuda.so.1 for its version and each device's name, memory and
    VMM attributes; [] when there is no driver or device."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        report.say("driver", "none (libcuda.so.1 not found): no NVIDIA driver on this machine")
        report.fix("GPU use needs an NVIDIA GPU and its driver")
        return []
    version = ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        report.say("driver", "libcuda.so.1 is present but cuInit failed (no usable GPU)")
        report.fix("the NVIDIA driver found no usable GPU (nvidia-smi says more)")
        return []
    count = ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(count))
    report.say("driver", f"CUDA {version.value // 1000}.{version.value % 1000 // 10} "
                         f"(driver API {version.value}), {count.value} device(s)")
    devices = []
    for index in range(count.value):
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), index)
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, dev)
        total = ctypes.c_size_t()
        cuda.cuDeviceTotalMem_v2(ctypes.byref(total), dev)

        def attribute(code: int) -> int:
            value = ctypes.c_int()
            return value.value if cuda.cuDeviceGetAttribute(ctypes.byref(value), code, dev) == 0 else 0

        devices.append({"index": index, "name": name.value.decode(errors="replace"),
                        "total": total.value, "vmm": attribute(_VMM_SUPPORTED),
                        "posix_fd": attribute(_POSIX_FD_HANDLES),
                        "fabric": attribute(_FABRIC_HANDLES)})
    return devices


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _cuda_support() -> Tuple[int, str]:
    detail = ctypes.c_char_p()
    status = lib().cachealloc_cuda_support(ctypes.byref(detail))
    return status, (detail.value or b"").decode()


def _glue(report: Report, torch) -> Optional[str]:
    """Reports which glue fits the running torch; loads it on a CUDA torch.
    Returns the problem, or None."""
    have = ", ".join(torch_glue.prebuilt_releases()) or "none"
    report.say("glue", f"prebuilt for torch {have}")
    cuda_torch = hasattr(torch._C, "_cuda_customAllocator") and torch.version.cuda
    for path, origin in torch_glue.candidates(torch):
        if not cuda_torch:
            report.say("glue", f"{origin}: {path} (not loaded: this torch has no CUDA)")
            return None
        try:
            torch_glue.load(path, torch.__version__)
        except (RuntimeError, OSError) as e:
            report.say("glue", f"{origin}: {path} does not load: {e}")
            continue
        report.say("glue", f"{origin}: {path} (loads)")
        return None
    if not cuda_torch:
        report.say("glue", f"none for torch {torch.__version__} (only a CUDA torch uses it)")
        return None
    try:
        compiler = glue_build._compiler()
    except glue_build.GlueBuildError:
        compiler = None
    if compiler:
        report.say("glue", f"none fits torch {torch.__version__}; install() will compile one with "
                           f"{compiler} (once, about a minute)")
        return None
    return torch_glue.unsupported_message(torch)


def diagnose() -> Tuple[List[str], str, bool]:
    """(finding lines, verdict line, ready for GPU use)."""
    report = Report()
    try:
        report.say("library", library_path())
        lib()
    except (FileNotFoundError, OSError) as e:
        report.say("library", f"cannot be loaded: {e}")
        return report.lines, f"not ready: the package is broken ({e}); reinstall it", False
    try:
        report.say("tool", str(tool_path()))
    except ToolNotFound as e:
        report.say("tool", str(e))
    # torch first: the CUDA backends use the CUDA runtime torch loads, as
    # they will under install().
    try:
        import torch
    except ImportError:
        torch = None
    status, detail = _cuda_support()
    report.say("CUDA backends", {1: f"cuda and async, runtime {detail}",
                                 0: f"built, but {detail}",
                                 -1: detail}[status])
    if status == 0:
        report.fix(detail)
    elif status < 0:
        report.fix("reinstall cachealloc with GPU support (the CUDA headers were missing at build "
                   "time): pip install --no-build-isolation --force-reinstall with torch's CUDA "
                   "build installed, or CUDA_HOME set")
    if torch is None:
        report.say("torch", "not installed")
        report.fix("install torch (a CUDA build) for GPU use")
    if torch is not None:
        cuda = torch.version.cuda
        report.say("torch", f"{torch.__version__}, " + (f"CUDA {cuda}" if cuda else "CPU-only build")
                   + f", C++11 ABI {int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))}")
        if not cuda:
            report.fix(f"torch {torch.__version__} is a CPU-only build: install a CUDA build of "
                       "torch for GPU use")
        problem = _glue(report, torch)
        if problem:
            report.fix(problem)
    devices = _driver(report)
    for d in devices:
        handles = [name for name, key in (("POSIX fd", "posix_fd"), ("fabric", "fabric")) if d[key]]
        report.say(f"GPU {d['index']}",
                   f"{d['name']}, {_gib(d['total'])}; VMM (expandable segments) "
                   f"{'yes' if d['vmm'] else 'NO'}; IPC handle types: "
                   f"{', '.join(handles) or 'none (expandable segments cannot be shared)'}")
    if torch is not None and torch.version.cuda and devices:
        try:
            for d in devices:
                free, total = torch.cuda.mem_get_info(d["index"])
                report.say(f"GPU {d['index']}", f"free {_gib(free)} of {_gib(total)} (torch)")
        except RuntimeError as e:
            report.say("torch CUDA", f"torch cannot use the GPU: {e}")
            report.fix(f"torch cannot use the GPU ({e}): its CUDA {torch.version.cuda} may need a "
                       "newer driver")
    if devices and not any(d["vmm"] for d in devices):
        report.say("note", "no device supports VMM: expandable_segments:True is unavailable")
    if not report.fixes:
        return report.lines, ("ready: cachealloc.install() (or `cachealloc run -- ...`) gives glue "
                              "mode on the GPU"), True
    return report.lines, ("not ready for GPU use: " + report.fixes[0] +
                          ". The lab (cachealloc replay/compare/min-memory) and "
                          "install(backend='simulated') work here."), False


def main(argv: Optional[List[str]] = None) -> int:
    """Prints the findings and the verdict; exit 0 when ready for GPU use,
    1 otherwise, 2 for arguments it does not take."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="cachealloc doctor", description="Checks this machine for cachealloc (the package, "
        "torch, the PyTorch glue, CUDA backends, the driver, each GPU) and ends with one line: "
        "ready, or what to fix. Installs nothing.",
        epilog="exit status: 0 ready for GPU use, 1 not ready, 2 bad usage")
    try:
        parser.parse_args([] if argv is None else argv)
    except SystemExit as e:
        return 0 if e.code == 0 else 2
    lines, verdict, ready = diagnose()
    width = shutil.get_terminal_size((100, 20)).columns
    print("\n".join(lines))
    print("-" * min(width, 60))
    print(verdict)
    return 0 if ready else 1
