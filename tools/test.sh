#!/usr/bin/env bash
# Installs what is missing, builds, runs every test suite, and ends with
# "N passed, N failed[, N skipped]" counted from Meson's results.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/build.sh
builddir=${OCLF_BUILD_DIR:-build}

status=0
meson test -C "$builddir" --print-errorlogs --num-processes "$(nproc)" || status=$?

python3 - "$builddir/meson-logs/testlog.json" <<'PY'
import json, sys
passed = failed = skipped = 0
with open(sys.argv[1]) as f:
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
