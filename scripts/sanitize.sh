#!/usr/bin/env bash
# A checking run: builds everything with AddressSanitizer and
# UndefinedBehaviorSanitizer (CACHEALLOC_SANITIZE=ON, -O1, in build-sanitize/)
# and runs the C++ suite and the Python suite against that build. Any
# report (out-of-bounds access, use after free, leak in a C++ test, signed
# overflow, misaligned load, ...) fails the test that triggered it.
# Takes about 10 minutes on 2 cores. Not part of scripts/test.sh: the
# normal suite already takes most of CI's time.
#
# Python loads the sanitized libcachealloc.so, so the sanitizer runtimes
# are preloaded into the interpreter; leak checking is off there (Python
# itself keeps memory until exit). The headless-Chromium test is left out:
# the preload would be inherited by Chromium, which is not built for it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-sanitize
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 \
  -DCACHEALLOC_SANITIZE=ON -DCACHEALLOC_BUILD_BENCHMARKS=OFF
ninja -C "$build"
(cd "$build" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$(nproc)" --timeout 1500)
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
  ASAN_OPTIONS=detect_leaks=0 \
  CACHEALLOC_LIBRARY="$PWD/$build/bindings/libcachealloc.so" CACHEALLOC_BUILD="$PWD/$build" \
  python3 -m pytest -q -rs tests/python -k "not chromium"
