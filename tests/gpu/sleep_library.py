"""Builds the sleep-mode allocator example (examples/sleep_mode) once per
test session, for the GPU tests that use it as a foreign allocator."""
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def build_sleep_library(build_dir: pathlib.Path) -> pathlib.Path:
    """cmake-builds examples/sleep_mode into build_dir; returns the .so's
    path. Raises CalledProcessError with the tools' output on failure."""
    for cmd in (["cmake", "-S", str(ROOT / "examples" / "sleep_mode"), "-B", str(build_dir)],
                ["cmake", "--build", str(build_dir)]):
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    return build_dir / "libsleep_allocator.so"
