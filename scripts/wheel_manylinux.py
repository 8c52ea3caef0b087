"""Gives a wheel built by `pip wheel .` its manylinux platform tag, after
checking what its binaries need from the system (a small, explicit subset
of what auditwheel checks; auditwheel is not needed):

  * every library they name as needed is either in the wheel or one of the
    system libraries the manylinux policies allow (glibc's, libstdc++,
    libgcc_s), or one of torch's, which the glue binds to the loaded torch
    (bindings/torch/glue_matrix.cmake);
  * the tag is manylinux_2_N for the newest GLIBC_2.N symbol version they
    use, so pip refuses the wheel on an older glibc instead of failing
    at load time.

    python3 scripts/wheel_manylinux.py DIST_DIR/cachealloc-*.whl
prints the new wheel's path (the old one is replaced) and what it needs.
Needs binutils' readelf and the `wheel` package (wheel tags).
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import zipfile

SYSTEM = re.compile(r"^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so")
TORCH = {"libc10.so", "libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so"}


def elf_needs(path: pathlib.Path):
    """(needed sonames, GLIBC_2.N minors, GLIBCXX_3.4.N patch numbers)."""
    dynamic = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
    versions = subprocess.run(["readelf", "-V", str(path)], capture_output=True, text=True).stdout
    glibc = [int(m) for m in re.findall(r"Name: GLIBC_2\.(\d+)", versions)]
    cxx = [int(m) for m in re.findall(r"Name: GLIBCXX_3\.4\.(\d+)", versions)]
    return needed, glibc, cxx


def main() -> int:
    wheel = pathlib.Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp)
        elves = [p for p in pathlib.Path(tmp).rglob("*")
                 if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]
        shipped = {p.name for p in elves}
        glibc_max, cxx_max, problems = 17, 0, []
        for p in elves:
            needed, glibc, cxx = elf_needs(p)
            glibc_max = max([glibc_max] + glibc)
            cxx_max = max([cxx_max] + cxx)
            for name in needed:
                if not (name in shipped or SYSTEM.match(name) or name in TORCH):
                    problems.append(f"{p.relative_to(tmp)} needs {name}, neither shipped nor a "
                                    "manylinux system library")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    tag = f"manylinux_2_{glibc_max}_x86_64"
    out = subprocess.run([sys.executable, "-m", "wheel", "tags", "--remove", "--platform-tag", tag,
                          str(wheel)], capture_output=True, text=True, cwd=wheel.parent)
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return 1
    new = wheel.parent / out.stdout.strip().splitlines()[-1]
    print(f"{new} (needs glibc 2.{glibc_max}, libstdc++ GLIBCXX_3.4.{cxx_max}; "
          f"{len(elves)} binaries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
