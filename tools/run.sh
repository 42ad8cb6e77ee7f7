#!/usr/bin/env bash
# The main job: installs what is missing, builds, tunes briefly, then
# benchmarks every operation on the default OpenCL device (fused, unfused,
# and what dispatch picks from the fresh tuning records), with the device's
# copy bandwidth measured in the same run; writes the results as JSON and a
# bar chart of them (build/bench.json, build/bench.png).
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
# The table on stdout; the same results as JSON, and drawn as a bar chart
# against the copy bandwidth (tools/plot_bench.py, matplotlib) in the build
# folder.
json="$builddir/bench.json"
chart="$builddir/bench.png"
rm -f "$json" # never draw a previous run's results
status=0
"$builddir/tools/oclfuse-bench" --dtypes f32,f16,bf16 --paths fused,unfused,auto --json-file "$json" "$@" \
  || status=$?
if [ -s "$json" ]; then
  if /usr/bin/python3 tools/plot_bench.py "$json" -o "$chart" >/dev/null; then
    echo "run.sh: results in $json, bandwidth chart in $chart" >&2
  else
    echo "run.sh: results in $json; the chart failed (python3-matplotlib?)" >&2
  fi
fi
exit $status
