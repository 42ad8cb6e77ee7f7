#!/usr/bin/env bash
# The main job: installs what is missing, builds, tunes briefly, then
# benchmarks every operation on the default OpenCL device (fused, unfused,
# and what dispatch picks from the fresh tuning records), with the device's
# copy bandwidth measured in the same run; writes the results as JSON, a
# summary page of them and the per-op detail (build/bench.json,
# build/bench.png, build/bench-detail.png).
#
# Two sizes. By default a short run: each op's first two bench shapes whose
# call is estimated under 0.1 s (else its cheapest one) and its out-of-cache
# shape, 0.2 s per path and shape (a path of slow calls 3 of them), after
# 60 s of tuning over those same shapes: a quarter of an hour on two CPU
# cores. `--full` (or OCLF_RUN_FULL=1) runs every bench shape, 1 s per path
# and shape, plus the slow shapes (oclfuse-bench --full), after 600 s of tuning: hours on a CPU, where an unfused l2_topk
# of 100 queries over a million rows takes tens of seconds a call.
#
# Every storage dtype (f32, f16, bf16), for the tuner and the benchmark
# (--dtypes f32 narrows the benchmark); other arguments go to the
# benchmark. OCLF_TUNE_BUDGET (seconds; 0 skips tuning) overrides the
# tuning time (the tuner may overrun by the job in hand); it tunes the
# benchmark's own shapes into the per-machine database (resuming from its
# journal, so a second run spends its budget on new candidates).
set -euo pipefail
cd "$(dirname "$0")/.."

full=${OCLF_RUN_FULL:-0}
args=()
for a in "$@"; do
  if [ "$a" = --full ]; then full=1; else args+=("$a"); fi
done

start=$SECONDS
say() { echo "run.sh: $* ($((SECONDS - start)) s so far)" >&2; }

tools/build.sh
builddir=${OCLF_BUILD_DIR:-build}

if [ "$full" = 1 ]; then
  budget=${OCLF_TUNE_BUDGET:-600}
  tune_shapes=bench
  bench_size=(--full)
  say "full run: every bench shape, after ${budget} s of tuning"
else
  budget=${OCLF_TUNE_BUDGET:-60}
  tune_shapes=short
  bench_size=(--short)
  say "short run (about a quarter of an hour on two CPU cores; tools/run.sh --full for every bench shape): tuning for ${budget} s"
fi
if [ "$budget" != 0 ]; then
  "$builddir/tune/oclfuse-tune" --dtypes f32,f16,bf16 --shapes "$tune_shapes" --budget "$budget" \
    --resume || echo "run.sh: tuning failed; benchmarking with what the databases hold" >&2
  say "tuning done; benchmarking"
fi
# The table on stdout; the same results as JSON, drawn as one summary page
# (per op and dtype: %copy or GFLOP/s, fused against unfused) and as per-op
# detail panels against the copy bandwidth (tools/plot_bench.py, matplotlib)
# in the build folder.
json="$builddir/bench.json"
chart="$builddir/bench.png"
detail="$builddir/bench-detail.png"
rm -f "$json" # never draw a previous run's results
status=0
"$builddir/tools/oclfuse-bench" --dtypes f32,f16,bf16 --paths fused,unfused,auto \
  ${bench_size[@]+"${bench_size[@]}"} --json-file "$json" ${args[@]+"${args[@]}"} || status=$?
if [ -s "$json" ]; then
  if /usr/bin/python3 tools/plot_bench.py "$json" -o "$chart" --detail "$detail" >/dev/null; then
    echo "run.sh: results in $json, summary page in $chart, per-op detail in $detail" >&2
  else
    echo "run.sh: results in $json; the chart failed (python3-matplotlib?)" >&2
  fi
fi
say "done"
exit $status
