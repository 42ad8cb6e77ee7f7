#!/usr/bin/env bash
# The main job: installs what is missing, builds, then benchmarks every
# operation on the default OpenCL device (fused, unfused, and what dispatch
# picks), with the device's copy bandwidth measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
builddir=${OCLF_BUILD_DIR:-build}
if [ -f "$builddir/build.ninja" ]; then
  meson setup --reconfigure "$builddir" >/dev/null
else
  meson setup "$builddir" >/dev/null
fi
ninja -C "$builddir"

exec "$builddir/tools/oclfuse-bench" --dtypes f32,f16,bf16 "$@"
