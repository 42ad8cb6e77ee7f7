#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time
# over its corpus (tests/fuzz/corpus-*/). Exit 77 (skip) when clang or its
# fuzzer runtime is missing. Crashes and new corpus entries are written
# into the build folder ($1, crash-<target>-*), never the source tree.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$src/build/fuzz}
# the build folder, for the generated version header the public header includes
gen=${2:-$src/build}
secs=${OCLF_FUZZ_SECONDS:-15}
mkdir -p "$out"
command -v clang >/dev/null || { echo "clang not installed"; exit 77; }
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n){return 0;}' > "$out/probe.c"
clang -fsanitize=fuzzer "$out/probe.c" -o "$out/probe" 2>/dev/null ||
  { echo "clang's libFuzzer runtime is missing"; exit 77; }
cflags=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
        -I"$src/include" -I"$gen/include" -I"$src/lib" -DCL_TARGET_OPENCL_VERSION=120 -std=c11
        -D_POSIX_C_SOURCE=200809L)
clang "${cflags[@]}" "$src/tests/fuzz/fuzz_cache.c" "$src/lib/cache_format.c" -o "$out/fuzz_cache"
# The tuning-database parser stands on the op list, parameter sets and the error code alone.
clang "${cflags[@]}" "$src/tests/fuzz/fuzz_tunedb.c" "$src/lib/tunedb_parse.c" \
  "$src/lib/oplist.c" "$src/lib/params.c" "$src/lib/error.c" -o "$out/fuzz_tunedb" -lOpenCL -ljansson -lpthread
# The expression parser and code generator stand alone.
clang "${cflags[@]}" "$src/tests/fuzz/fuzz_expr.c" "$src"/lib/expr/*.c "$src/lib/error.c" \
  -o "$out/fuzz_expr" -lOpenCL -lpthread -lm
status=0
for t in "$out"/fuzz_*; do
  name=$(basename "$t"); name=${name#fuzz_}
  corpus="$src/tests/fuzz/corpus-$name"
  work="$out/corpus-$name"
  mkdir -p "$corpus" "$work"
  "$t" -max_total_time="$secs" -artifact_prefix="$out/crash-$name-" \
       "$work" "$corpus" 2>&1 | tail -5 || status=1
done
exit $status
