#!/usr/bin/env bash
# Installs what is missing, builds, runs every test suite, and ends with
# "N passed, N failed[, N skipped]" counted from Meson's results.
#
#   tools/test.sh          every suite, the sanitizer build and valgrind (CI)
#   tools/test.sh --quick  the suites tagged `quick` (the op suites in their
#                          quick form, api, cache, tunedb, lib-deps, readme,
#                          docs)
#                          in the existing build: no package installation, no
#                          sanitizers, valgrind, oclgrind, cross-compiling or
#                          rusticl
set -euo pipefail
cd "$(dirname "$0")/.."

builddir=${OCLF_BUILD_DIR:-build}
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: tools/test.sh [--quick]" >&2; exit 2 ;;
esac

if [ "$quick" = 1 ]; then
  # Configure and build without tools/setup.sh (which may call apt-get).
  if [ -f "$builddir/build.ninja" ]; then
    meson setup --reconfigure "$builddir" >/dev/null
  else
    meson setup "$builddir" >/dev/null
  fi
  ninja -C "$builddir"
  status=0
  OCLF_TEST_QUICK=1 meson test -C "$builddir" --print-errorlogs --num-processes "$(nproc)" \
    --suite quick || status=$?
  python3 - "$builddir/meson-logs/testlog.json" <<'PY'
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
for line in open(sys.argv[1]):
    if line.strip():
        r = json.loads(line).get("result")
        counts["passed" if r in ("OK", "EXPECTEDFAIL") else
               "skipped" if r == "SKIP" else "failed"] += 1
tail = f", {counts['skipped']} skipped" if counts["skipped"] else ""
print(f"{counts['passed']} passed, {counts['failed']} failed{tail}")
PY
  exit $status
fi

tools/build.sh
status=0
# The whole rusticl matrix takes hours of llvmpipe compiling; CI runs its
# sample (suite rusticl), OCLF_RUSTICL_FULL=1 every test.
skip_suites=()
[ "${OCLF_RUSTICL_FULL:-0}" = 1 ] || skip_suites+=(--no-suite rusticl-full)
meson test -C "$builddir" --print-errorlogs --num-processes "$(nproc)" "${skip_suites[@]}" \
  || status=$?

# Sanitizer build: the host-side suites again under ASan + UBSan (see docs/testing.md
# for the options). Results are appended to the same count.
asandir=${OCLF_ASAN_BUILD_DIR:-build-asan}
if [ "${OCLF_SKIP_ASAN:-0}" = 0 ]; then
  if [ -f "$asandir/build.ninja" ]; then
    meson setup --reconfigure "$asandir" >/dev/null
  else
    meson setup "$asandir" -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
  fi
  ninja -C "$asandir"
  ASAN_OPTIONS=detect_leaks=0:protect_shadow_gap=0:abort_on_error=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 OCLF_TEST_QUICK=1 \
    meson test -C "$asandir" --print-errorlogs --num-processes "$(nproc)" \
      --suite faults --suite cache --suite threads --suite norm || status=$?
fi

# valgrind memcheck on one full op suite: no leak or error from liboclfuse.
vg_log="$builddir/meson-logs/valgrind.txt"
vg_result=SKIP
if command -v valgrind >/dev/null && [ "${OCLF_SKIP_VALGRIND:-0}" = 0 ]; then
  if CK_FORK=no OCLF_CACHE_DIR="$PWD/$builddir/test-program-cache" \
     valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect \
       --error-exitcode=99 --suppressions=tests/valgrind/pocl.supp \
       "$builddir/tests/test_faults" >"$vg_log" 2>&1; then
    vg_result=OK
  else
    vg_result=FAIL; status=1; tail -40 "$vg_log"
  fi
fi

logs=("$builddir/meson-logs/testlog.json")
[ "${OCLF_SKIP_ASAN:-0}" = 0 ] && logs+=("$asandir/meson-logs/testlog.json")
python3 - "$vg_result" "${logs[@]}" <<'PY'
import json, sys
passed = failed = skipped = 0
extra = sys.argv[1]
if extra == 'OK':
    passed += 1
elif extra == 'FAIL':
    failed += 1
for path in sys.argv[2:]:
  with open(path) as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        r = json.loads(line).get('result')
        if r in ('OK', 'EXPECTEDFAIL'):
            passed += 1
        elif r == 'SKIP':
            skipped += 1
        else:
            failed += 1
tail = f", {skipped} skipped" if skipped else ""
print(f"{passed} passed, {failed} failed{tail}")
sys.exit(1 if failed else 0)
PY
exit $status
