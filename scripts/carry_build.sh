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
