#!/usr/bin/env bash
# tools/gpu-kit.sh rehearsed on this machine: the kit is fetched into KIT
# (kept between runs, so a later run downloads nothing), then built, tested,
# tuned and benchmarked with a PATH that holds only the kit's prefix and a
# few base commands, and with the kit's own gcc: the system's meson, ninja,
# pkg-config, compiler and python3 are out of reach. The run must then show
# that every header came from the prefix or the tree, that the kit's
# programs load the kit's liboclfuse and OpenCL, jansson and CLBlast from
# the prefix, that the reduced stages left their results in OUT, and that
# the tuning record, imported into the kit's tune/db/builtin.json, is what
# dispatch takes. POCL stands in for the vendor driver (found through
# /etc/OpenCL/vendors). Exits 77 (skipped) when the packages cannot be
# downloaded.
#   tests/gpu_kit.sh SOURCE_ROOT KIT_DIR MAIN_BUILD_DIR
set -euo pipefail
src=$1 kit=$2 mainbuild=$3
kitsh="$src/tools/gpu-kit.sh"
prefix="$kit/prefix"
out="$kit/out"

fail() { echo "FAIL: $*" >&2; exit 1; }

status=0
"$kitsh" fetch "$kit" || status=$?
if [ $status = 75 ]; then
  echo "SKIP: the kit's packages could not be downloaded (no network?)"
  exit 77
fi
[ $status = 0 ] || fail "gpu-kit.sh fetch exited $status"

# The run uses the copy of the source in the kit, as the other machine
# would: a file the build needs and the copy lacks fails here.
rm -rf "$out"
"$kit/src/tools/gpu-kit.sh" run "$kit" "$out" --isolate --cc kit --stage unpack,build,info,test,tune,bench \
  --suites tunedb \
  --tune-budget 5 --tune-args "--ops rms_norm --dtypes f32 --shapes 64x256" \
  --bench-args "--ops rms_norm --dtypes f32 --shapes 64x256 --min-time 0.05 --samples 5" ||
  fail "gpu-kit.sh run exited $?"

# The isolated PATH reaches the kit's tools and no system compiler.
found=$("$kitsh" exec --isolate "$kit" -- bash -c \
  'for c in gcc meson ninja pkg-config pkgconf python3 nm; do command -v $c || echo "$c: none"; done; command -v cc || true')
echo "$found"
while read -r p; do
  case "$p" in "$prefix"/*) ;; *) fail "isolated PATH gives $p, not the prefix's" ;; esac
done <<<"$found"

# The build ran the kit's compiler and Meson, and Meson regenerates with them.
python3=$prefix/usr/bin/python3
for rule in c_COMPILER c_LINKER; do
  grep -A1 "^rule $rule\$" "$kit/build/build.ninja" | grep -q " command = $prefix/cc/usr/bin/gcc " ||
    fail "build.ninja's $rule runs another compiler"
done
grep -A1 '^rule REGENERATE_BUILD' "$kit/build/build.ninja" | grep -q " command = $prefix/usr/bin/meson --internal regenerate $kit/src " ||
  fail "build.ninja regenerates with another meson"
head -1 "$prefix/usr/bin/meson" | grep -qx "#!$prefix/usr/bin/python3" || fail "the kit's meson runs another python"

# Every header a compile read lies in the prefix, the source or the build.
deps=$("$prefix/usr/bin/ninja" -C "$kit/build" -t deps | sed -n 's/^ \{1,\}\(\/[^ ]*\)$/\1/p' | sort -u)
n=$(echo "$deps" | grep -c . || true)
[ "$n" -gt 50 ] || fail "ninja -t deps lists $n headers: no dependency information"
outside=$(echo "$deps" | grep -v -e "^$prefix/" -e "^$kit/src/" -e "^$kit/build/" || true)
[ -z "$outside" ] || fail "headers from outside the kit: $(echo "$outside" | head -5 | tr '\n' ' ')"
echo "$n headers, all from the prefix or the tree"

# The kit's programs load the kit's library, and its dependencies load from
# the prefix (meson test's LD_LIBRARY_PATH holds the tree's own build).
libs=$("$kitsh" exec "$kit" -- ldd "$kit/build/tools/oclfuse-bench")
for l in liboclfuse.so.0 libOpenCL.so.1 libjansson.so.4 libclblast.so.1; do
  want=$prefix/; [ $l = liboclfuse.so.0 ] && want=$kit/build/
  echo "$libs" | grep -q "$l => $want" || fail "$l not from $want: $(echo "$libs" | grep "$l" || echo missing)"
done

# What the stages left in OUT.
for f in build.log info.txt test.log testlog.json tune.log tuning.json bench.txt bench.json; do
  [ -s "$out/$f" ] || fail "$out/$f missing or empty"
done
grep -q 'fingerprint: ' "$out/info.txt" || fail "info.txt names no device"
grep -q 'pocl' "$out/info.txt" || fail "info.txt lists no ICD file for POCL"
grep -q 'Max compute units' "$out/info.txt" || fail "info.txt has no clinfo facts"
"$python3" - "$out" <<'PY' || fail "the stages' results are wrong"
import json, sys
out = sys.argv[1]
tests = [json.loads(l) for l in open(out + '/testlog.json') if l.strip()]
assert [t['name'].split(' / ')[-1] for t in tests] == ['tunedb'], [t['name'] for t in tests]
assert tests[0]['result'] == 'OK', tests[0]['result']
recs = json.load(open(out + '/tuning.json'))['records']
assert len(recs) == 1, len(recs)
r = recs[0]
assert (r['op'], r['dtype'], r['shape']) == ('rms_norm', 'f32', {'rows': 64, 'cols': 256}), r
assert r['device']['type'] == 'CPU' and r['choice']['path'] in ('fused', 'unfused'), r
rows = json.load(open(out + '/bench.json'))
paths = sorted(x['path'] for x in rows)
assert paths == ['auto', 'fused', 'unfused'], paths
for x in rows:
    assert (x['op'], x['dtype'], x['shape']) == ('rms_norm', 'f32', {'rows': 64, 'cols': 256}), x
    assert x['time_ns'] > 0 and x['gbps'] > 0, x
print(f"tunedb OK; 1 tuning record ({r['choice']['path']}); bench: {', '.join(paths)}")
PY

# The records come back through import (the library's merge), once per
# device, op, dtype and shape however often they are merged.
db="$kit/imported.json"
rm -f "$db"
for _ in 1 2; do
  OCLF_BUILD_DIR="$mainbuild" "$kitsh" import "$out/tuning.json" "$db"
done
[ ! -e "$db.lock" ] || fail "import left $db.lock"
"$python3" - "$db" "$out/tuning.json" <<'PY' || fail "import merged the wrong records"
import json, sys
got = json.load(open(sys.argv[1]))['records']
want = json.load(open(sys.argv[2]))['records']
assert len(got) == len(want) == 1, (len(got), len(want))
assert got[0]['choice'] == want[0]['choice'] and got[0]['device'] == want[0]['device']
PY
# Imported into the kit's copy of tune/db/builtin.json and built, the
# record is what dispatch takes on this device, with no other database in
# reach (the kit's environment has no OCLF_TUNING_DB and an empty
# XDG_DATA_HOME). The copy is restored and built again after.
builtin="$kit/src/tune/db/builtin.json"
cp "$builtin" "$kit/builtin.json.orig"
restore() { cp "$kit/builtin.json.orig" "$builtin" && touch "$builtin"; }
trap restore EXIT
OCLF_BUILD_DIR="$mainbuild" "$kitsh" import "$out/tuning.json" "$builtin"
explain=$("$kitsh" exec "$kit" -- sh -c \
  'ninja -C "$0/build" >/dev/null && "$0/build/tools/oclfuse-info" --ops rms_norm --shape 64x256' "$kit")
echo "$explain" | tail -2
echo "$explain" | grep -q '^  uses: built-in database builtin.json record 0 (exact device match; tuned shape rows=64 cols=256)' ||
  fail "dispatch does not take the imported record from the built-in database"
restore
trap - EXIT
"$kitsh" exec "$kit" -- ninja -C "$kit/build" >/dev/null
echo "gpu-kit rehearsal passed"
