#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz: fuzz_pickle, fuzz_config,
# fuzz_replay, fuzz_explain) into build-fuzz/ with clang, ASan and UBSan
# (-DCACHEALLOC_FUZZ=ON; the test suite, benchmarks and PyTorch glue are
# not built). Installs clang and libFuzzer from Debian when missing. Uses
# ccache when installed. Prints the build's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang++ >/dev/null ||
   ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  sudo_=(); [ "$(id -u)" = 0 ] || sudo_=(sudo)
  "${sudo_[@]}" apt-get install -y clang libclang-rt-14-dev llvm >/dev/null
fi
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
t0=$SECONDS
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="-O1 -g" -DCACHEALLOC_FUZZ=ON -DCACHEALLOC_BUILD_TESTS=OFF \
  -DCACHEALLOC_BUILD_BENCHMARKS=OFF -DCACHEALLOC_WITH_TORCH=OFF "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_targets
echo "fuzz_build: build took $((SECONDS - t0)) s"
