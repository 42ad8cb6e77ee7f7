#!/usr/bin/env bash
# The main job: installs what is missing, builds, then benchmarks every
# operation on the default OpenCL device (fused, unfused, and what dispatch
# picks), with the device's copy bandwidth measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/build.sh
builddir=${OCLF_BUILD_DIR:-build}

exec "$builddir/tools/oclfuse-bench" --dtypes f32,f16,bf16 "$@"
