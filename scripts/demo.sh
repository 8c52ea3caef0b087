#!/usr/bin/env bash
# The main job on a bundled example, no GPU needed: installs what is missing,
# builds, and replays a trace recorded from PyTorch's native allocator
# (examples/traces/mlp.pickle.gz, an MLP training run on an H100) through
# cachealloc, checking every event against the recording.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
./build/tools/cachealloc replay examples/traces/mlp.pickle.gz --snapshot build/mlp_replayed.pickle
echo "replayed snapshot written to build/mlp_replayed.pickle (open it at https://pytorch.org/memory_viz)"
