#!/usr/bin/env bash
# Prepares .carry/lib for the GPU machine: libcachealloc.so (built here with
# the CUDA backends) and the Abseil shared libraries it needs (found beside
# it through its $ORIGIN runpath), stripped of debug info.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mkdir -p .carry/lib
rm -f .carry/lib/*
cp "$build/bindings/libcachealloc.so" .carry/lib/
ldd .carry/lib/libcachealloc.so | awk '/libabsl/ {print $3}' | xargs -r -I{} cp -L {} .carry/lib/
strip --strip-debug .carry/lib/*.so*
du -sh .carry/lib
# The CPU benchmarks too, with Google Benchmark's library and the
# reference traces, so the GPU host's CPU can be measured with the same programs
# (gpu_session.sh bench runs them when present).
if [ -x "$build/benchmarks/engine_bench" ]; then
  mkdir -p .carry/bin .carry/traces
  # The CLI too: the GPU tests replay native's recordings with it.
  cp "$build/benchmarks/engine_bench" "$build/benchmarks/replay_bench" "$build/benchmarks/clock_cost" \
    "$build/tools/cachealloc" .carry/bin/
  ldd "$build/benchmarks/engine_bench" "$build/benchmarks/replay_bench" "$build/tools/cachealloc" \
    | awk '/libabsl|libbenchmark/ {print $3}' | sort -u | xargs -r -I{} cp -L {} .carry/lib/
  strip --strip-debug .carry/bin/* .carry/lib/*.so*
  cp tests/data/traces/*.pickle.gz tests/data/traces/*.json .carry/traces/
fi
du -sh .carry
