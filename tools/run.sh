#!/usr/bin/env bash
# The main job: installs what is missing, builds, tunes briefly, then
# benchmarks every operation on the default OpenCL device (fused, unfused,
# and what dispatch picks from the fresh tuning records), with the device's
# copy bandwidth measured in the same run.
#
# Every storage dtype (f32, f16, bf16) by default, for the tuner and the
# benchmark (--dtypes f32 narrows the benchmark); arguments go to the
# benchmark. OCLF_TUNE_BUDGET (seconds, default 120; 0 skips tuning) bounds
# the tuner (it may overrun by the job in hand);
# it tunes the benchmark's own shapes into the per-machine database
# (resuming from its journal, so a second run spends its budget on new
# candidates).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/build.sh
builddir=${OCLF_BUILD_DIR:-build}

budget=${OCLF_TUNE_BUDGET:-120}
if [ "$budget" != 0 ]; then
  "$builddir/tune/oclfuse-tune" --dtypes f32,f16,bf16 --shapes bench --budget "$budget" --resume \
    || echo "run.sh: tuning failed; benchmarking with what the databases hold" >&2
fi
exec "$builddir/tools/oclfuse-bench" --dtypes f32,f16,bf16 --paths fused,unfused,auto "$@"
