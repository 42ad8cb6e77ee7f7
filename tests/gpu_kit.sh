#!/usr/bin/env bash
# tools/gpu-kit.sh rehearsed on this machine, as a lent GPU machine would
# run it: `fetch --lean` into KIT (kept between runs, so a later run
# downloads nothing), then the lease profile from the tree with --isolate
# (PATH holds only the kit's prefix, a few base commands and this machine's
# compiler: the system's meson, ninja, pkg-config and python3 are out of
# reach), POCL standing in for the vendor driver, at the sizes of a CPU
# device (OCLF_KIT_LEASE_SIZES=small) and with caps for two cores. The run
# must go through every stage, one of them cut at its cap, and leave at most
# six files in OUT with the results the summary names; the headers and
# libraries must come from the prefix; a machine with no driver must still
# get a probe and a summary saying what it has; and `import` must take the
# records, the bench JSON and a dated note back (into copies here: the tree
# is left as it was). Exits 77 (skipped) when the packages cannot be
# downloaded.
#   tests/gpu_kit.sh SOURCE_ROOT KIT_DIR MAIN_BUILD_DIR
set -euo pipefail
src=$1 kit=$2 mainbuild=$3
kitsh="$src/tools/gpu-kit.sh"
prefix="$kit/prefix"
out="$kit/out"
MiB=1048576

fail() { echo "FAIL: $*" >&2; exit 1; }

status=0
"$kitsh" fetch --lean "$kit" || status=$?
if [ $status = 75 ]; then
  echo "SKIP: the kit's packages could not be downloaded (no network?)"
  exit 77
fi
[ $status = 0 ] || fail "gpu-kit.sh fetch --lean exited $status"

# Sizes: the lean kit (what travels: debs/ and packages.txt) at most 20 MiB,
# and with the tracked tree under 48 MiB.
kitbytes=$(( $(du -sb "$kit/debs" | cut -f1) + $(stat -c %s "$kit/packages.txt") ))
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  treebytes=$(cd "$src" && git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
else
  treebytes=$(du -sb --exclude='./build*' "$src" | cut -f1)
fi
echo "lean kit: $(wc -l <"$kit/packages.txt") packages, $kitbytes bytes; tracked tree $treebytes bytes"
[ "$kitbytes" -le $((20 * MiB)) ] || fail "the lean kit is $kitbytes bytes, over 20 MiB"
[ $((kitbytes + treebytes)) -lt $((48 * MiB)) ] || fail "kit and tree are $((kitbytes + treebytes)) bytes, not under 48 MiB"
! grep -qE '^(gcc|gcc-[0-9]+|libc6-dev|binutils) ' "$kit/packages.txt" || fail "the lean kit carries a compiler"
grep -q '^meson ' "$kit/packages.txt" && grep -q '^ninja-build ' "$kit/packages.txt" ||
  fail "the lean kit lacks meson or ninja"

# The profile's own caps add up to under 9 minutes.
caps=$("$kitsh" caps)
echo "$caps" | tr '\n' ' '; echo
total=$(echo "$caps" | sed -n 's/^total //p')
[ "$(echo "$caps" | grep -cvE '^(total|deadline) ')" = 10 ] || fail "the lease has not ten stages"
[ "$total" -lt 540 ] || fail "the lease's caps add up to $total s"
[ "$(echo "$caps" | sed -n 's/^deadline //p')" -lt 540 ] || fail "the lease's deadline is not under 540 s"

# The lease profile, caps for a two-core machine at the small sizes and 5 s
# of tuning; the tuned bench gets 2 s, which no op's first compile fits in: the stage is
# cut and the ones after it still run.
rm -rf "$out"
status=0
OCLF_KIT_LEASE_SIZES=small OCLF_KIT_SUITES=api OCLF_KIT_DEADLINE=1500 OCLF_KIT_TUNE_BUDGET=5 OCLF_KIT_JOB_SECONDS=120 \
  OCLF_KIT_CAPS=unpack=120,build=900,matrix=60,test=200,bench=200,layer=200,tune=200,tuned=2,binaries=60 \
  "$kitsh" run --profile lease --isolate "$kit" "$out" >"$kit/lease.log" 2>&1 || status=$?
cat "$kit/lease.log"
[ $status = 1 ] || fail "the lease exited $status, not 1 (its tuned stage cut)"
grep -q 'stages not ok: tuned ' "$kit/lease.log" || fail "the lease's failure does not name the cut stage alone"

# OUT: at most six files, none in a folder, each under 16 MiB, named as the
# lent machine sends them back.
files=$(cd "$out" && find . -mindepth 1 | sed 's|^\./||' | sort)
echo "OUT: $(echo "$files" | tr '\n' ' ')"
[ "$(echo "$files" | wc -l)" -le 6 ] || fail "OUT holds more than six entries"
[ "$files" = "$(printf '%s\n' bench-tuned.json bench.json lease.tar.gz probe.txt summary.txt tuning.json | sort)" ] ||
  [ "$files" = "$(printf '%s\n' bench.json lease.tar.gz probe.txt summary.txt tuning.json | sort)" ] ||
  fail "OUT holds $(echo "$files" | tr '\n' ' ')"
for f in $files; do
  [ -f "$out/$f" ] && [ "$(stat -c %s "$out/$f")" -lt $((16 * MiB)) ] || fail "$f is not a file under 16 MiB"
done

# Every stage ran, in order, each within its cap.
stages=$(cut -f1,2 "$kit/lease/stages.tsv")
echo "$stages"
[ "$(cut -f1 <<<"$stages" | tr '\n' ' ')" = "unpack probe build matrix test bench layer tune tuned binaries " ] ||
  fail "the stages that ran: $(cut -f1 <<<"$stages" | tr '\n' ' ')"
[ "$(grep -c $'\tok$' <<<"$stages")" = 9 ] && grep -q $'^tuned\tcut at its cap$' <<<"$stages" ||
  fail "not every stage but the tuned bench ok, or that one not cut"
awk -F'\t' '$3 > $4 + 3 { exit 1 }' "$kit/lease/stages.tsv" || fail "a stage ran past its cap"

# What came back holds what each stage did.
sum=$(cat "$out/summary.txt")
grep -q '^tests: [1-9][0-9]* passed, 0 failed' <<<"$sum" || fail "the summary counts no passed test"
grep -q '^icds: pocl.icd' <<<"$sum" || fail "the summary names no ICD file"
grep -q '^layer (batch 16, ' <<<"$sum" || fail "the summary has no layer figures"
grep -q 'fingerprint: ' "$out/probe.txt" || fail "probe.txt has no oclfuse-info"
grep -q 'Max compute units' "$out/probe.txt" || fail "probe.txt has no clinfo facts"
grep -q 'cl_khr_subgroups: ' "$out/probe.txt" || fail "probe.txt lists no extension"
listing=$(tar -tzf "$out/lease.tar.gz")
for f in build.log matrix.txt test.log bench.txt layer-b1.json layer-b16.json tune.log tuning.json.journal binaries/index.txt; do
  grep -qx "./$f" <<<"$listing" || fail "lease.tar.gz lacks $f"
done
python3=$prefix/usr/bin/python3
mkdir -p "$kit/unpacked" && rm -rf "$kit/unpacked"/* && tar -xzf "$out/lease.tar.gz" -C "$kit/unpacked"
"$python3" - "$out" "$kit/unpacked" <<'PY' || fail "the lease's results are wrong"
import json, os, sys
out, run = sys.argv[1:3]
rows = json.load(open(out + '/bench.json'))
jobs = {('rms_norm', 'f32'), ('rms_norm', 'f16'), ('act_and_mul', 'f32'),
        ('attention_paged', 'f16'), ('linear', 'f32')}
got = {}
for r in rows:
    got.setdefault((r['op'], r['dtype']), set()).add(r['path'])
    assert r['time_ns'] > 0 and r['copy_same_bytes_gbps'] > 0, r
assert set(got) == jobs, sorted(got)
assert all({'fused', 'unfused', 'auto'} <= p for p in got.values()), got
recs = json.load(open(out + '/tuning.json'))['records']
assert len(recs) == 1 and (recs[0]['op'], recs[0]['dtype']) == ('rms_norm', 'f32'), recs
for b, tokens in (('1', 16), ('16', 256)):
    d = json.load(open(f'{run}/layer-b{b}.json'))
    kinds = [s['kind'] for s in d['steps']]
    assert d['batch'] == int(b) and kinds[0] == 'prefill' and kinds.count('decode') == 8, (b, kinds)
    assert d['steps'][0]['tokens'] == tokens and all(s['time_ms'] > 0 for s in d['steps']), d['steps'][0]
index = [l.split('\t') for l in open(run + '/binaries/index.txt') if l.strip()]
ops = {l[0].split('/')[0] for l in index}
assert {'rms_norm', 'act_and_mul', 'attention_paged', 'linear', 'layer'} <= ops, ops
for l in index:
    assert os.path.getsize(f'{run}/binaries/{l[0]}') == int(l[1]) > 0, l
print(f'bench: {len(rows)} rows; layer: batch 1 and 16; binaries: {len(index)} of {len(ops)} families')
PY
# the matrix stage: the emulated instructions against the host, lane by lane
grep -qE '^ok: [0-9]+ form\(s\) built, 0 check\(s\) failed' "$kit/unpacked/matrix.txt" &&
  grep -q 'emulated  bf16 m16n8k16 exact  128/128 bit-equal' "$kit/unpacked/matrix.txt" ||
  fail "the matrix stage's probe did not pass: $(cat "$kit/unpacked/matrix.txt")"

# The build used the machine's compiler (through the isolated PATH) and the
# kit's Meson, and every OpenCL, jansson, CLBlast and check header came from
# the prefix.
for rule in c_COMPILER c_LINKER; do
  cmd=$(grep -A1 "^rule $rule\$" "$kit/build/build.ninja" | sed -n 's/^ command = \([^ ]*\) .*/\1/p')
  case "$cmd" in "$prefix"/*|"") fail "build.ninja's $rule runs '$cmd', not the machine's compiler" ;; esac
  [ -x "$(readlink -f "$cmd")" ] || fail "build.ninja's $rule runs '$cmd', which is no program"
done
grep -A1 '^rule REGENERATE_BUILD' "$kit/build/build.ninja" | grep -q " command = $prefix/usr/bin/meson --internal regenerate $src " ||
  fail "build.ninja regenerates with another meson"
deps=$("$prefix/usr/bin/ninja" -C "$kit/build" -t deps | sed -n 's/^ \{1,\}\(\/[^ ]*\)$/\1/p' | sort -u)
n=$(echo "$deps" | grep -c . || true)
[ "$n" -gt 50 ] || fail "ninja -t deps lists $n headers: no dependency information"
outside=$(echo "$deps" | grep -v -e "^$prefix/" -e "^$src/" -e "^$kit/build/" || true)
wrong=$(echo "$outside" | grep -E '/(CL|clblast[^/]*|jansson[^/]*|check[^/]*)(/|\.h)' || true)
[ -z "$wrong" ] || fail "dependency headers from outside the kit: $(echo "$wrong" | head -5 | tr '\n' ' ')"
echo "$n headers; none of OpenCL's, CLBlast's, jansson's or check's from outside the prefix"
found=$("$kitsh" exec --isolate "$kit" -- bash -c \
  'for c in meson ninja pkgconf python3 clinfo; do command -v $c || echo "$c: none"; done')
while read -r p; do
  case "$p" in "$prefix"/*) ;; *) fail "isolated PATH gives $p, not the prefix's" ;; esac
done <<<"$found"
libs=$("$kitsh" exec "$kit" -- ldd "$kit/build/tools/oclfuse-bench")
for l in liboclfuse.so.0 libOpenCL.so.1 libjansson.so.4 libclblast.so.1; do
  want=$prefix/; [ $l = liboclfuse.so.0 ] && want=$kit/build/
  echo "$libs" | grep -q "$l => $want" || fail "$l not from $want: $(echo "$libs" | grep "$l" || echo missing)"
done

# A machine without a driver: no vendor library under the roots searched
# and no system ICD file. The probe still runs, the summary says what the
# machine has and why it stopped, and nothing is built.
empty="$kit/no-driver"
rm -rf "$empty" "$kit/out-none" && mkdir -p "$empty"
status=0
OCLF_KIT_LIB_ROOTS="$empty" OCLF_KIT_SYSTEM_ICDS="$empty" \
  "$kitsh" run --profile lease --isolate "$kit" "$kit/out-none" >"$kit/lease-none.log" 2>&1 || status=$?
[ $status = 1 ] || { cat "$kit/lease-none.log"; fail "the lease without a driver exited $status"; }
sum=$(cat "$kit/out-none/summary.txt")
echo "$sum" | head -12
grep -q '^STOPPED after the probe: no vendor OpenCL library' <<<"$sum" || fail "the summary does not say why it stopped"
grep -q '^cpu: ' <<<"$sum" && grep -q '^gpu: ' <<<"$sum" && grep -q '^cuda: ' <<<"$sum" &&
  grep -q '^driver libraries: ' <<<"$sum" || fail "the summary does not say what the machine has"
[ "$(cut -f1 "$kit/lease/stages.tsv" | tr '\n' ' ')" = "unpack probe " ] || fail "stages ran past the probe"
[ -s "$kit/out-none/probe.txt" ] && [ -s "$kit/out-none/lease.tar.gz" ] || fail "no probe or archive came back"

# import: the records into a copy of the built-in database (twice: one
# record per device, op, dtype and shape), the bench JSON and a dated note
# into a folder of the kit, the CPU's figures beside the GPU's (this run's
# own JSON stands in for the CPU's).
builtin="$src/tune/db/builtin.json"
before=$(sha256sum "$builtin")
db="$kit/builtin-copy.json"
cp "$builtin" "$db"
n0=$("$python3" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["records"]))' "$db")
rm -rf "$kit/notes"
for _ in 1 2; do
  OCLF_BUILD_DIR="$mainbuild" "$kitsh" import "$out" "$db" --notes "$kit/notes" --cpu "$out/bench.json"
done
[ "$(sha256sum "$builtin")" = "$before" ] || fail "import changed $builtin"
[ ! -e "$db.lock" ] || fail "import left $db.lock"
note=$(ls "$kit/notes"/*-gpu-*.md)
[ "$(echo "$note" | wc -l)" = 1 ] || fail "import wrote $(echo "$note" | wc -l) notes"
date=$(sed -n 's/^run: \([0-9-]\{10\}\) .*/\1/p' "$out/summary.txt")
[ -n "$date" ] || fail "the summary gives no date"
case "$(basename "$note")" in "$date"-gpu-*.md) ;; *) fail "the note $(basename "$note") is not dated $date" ;; esac
"$python3" - "$db" "$n0" "$out" "$note" <<'PY' || fail "import wrote the wrong records or note"
import json, os, sys
db, n0, out, note = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
got = json.load(open(db))['records']
want = json.load(open(out + '/tuning.json'))['records']
assert len(got) == n0 + 1, (len(got), n0)
assert any(g['choice'] == want[0]['choice'] and g['device'] == want[0]['device'] and
           g['shape'] == want[0]['shape'] for g in got)
base = note[:-3]
assert json.load(open(base + '-bench.json')) == json.load(open(out + '/bench.json'))
text = open(note).read()
rows = [l for l in text.splitlines() if l.startswith('| rms_norm | f32 | fused | 64x256 |')]
assert len(rows) == 1 and rows[0].count(' 64x256 ') == 2, rows   # GPU and CPU columns
assert 'liboclfuse GPU kit, lease profile' in text and 'tests: ' in text
print(f'import: 1 record into {len(got)}; note {os.path.basename(note)}')
PY
# The imported database is one dispatch reads: its record is what the
# lookup takes for that device, op, dtype and shape.
explain=$(OCLF_TUNING_DB="$db" "$kitsh" exec "$kit" -- "$kit/build/tools/oclfuse-info" --ops rms_norm --shape 64x256)
echo "$explain" | tail -1
echo "$explain" | grep -q "^  uses: context database $db record [0-9]* (exact device match; tuned shape rows=64 cols=256)" ||
  fail "dispatch does not take the imported record"
# The compiler's packages (fetch --cc), for a machine without a compiler:
# apart from the lean list, unpacked apart, and the kit's gcc, with the
# kit's binutils and no tool of this machine's toolchain on PATH, builds a
# program against the prefix's OpenCL and jansson that runs.
"$kitsh" fetch --cc "$kit" || fail "gpu-kit.sh fetch --cc exited $?"
grep -qE '^gcc-[0-9]+ ' "$kit/packages-cc.txt" && grep -q '^libc6-dev ' "$kit/packages-cc.txt" &&
  grep -q '^binutils ' "$kit/packages-cc.txt" || fail "packages-cc.txt lacks gcc, libc6-dev or binutils"
[ -z "$(comm -12 <(cut -d' ' -f1 "$kit/packages.txt" | sort) <(cut -d' ' -f1 "$kit/packages-cc.txt" | sort))" ] ||
  fail "a package is in both lists"
echo "compiler's packages: $(wc -l <"$kit/packages-cc.txt"), $(du -sb "$kit/debs-cc" | cut -f1) bytes"
"$kitsh" run "$kit" "$kit/out-cc" --stage unpack >/dev/null || fail "unpacking the compiler's packages failed"
cat >"$kit/cc-hello.c" <<'C'
#include <CL/cl.h>
#include <jansson.h>
#include <stdio.h>
int main(void)
{
    cl_uint n = 0;
    json_t *j = json_integer(clGetPlatformIDs(0, NULL, &n) == CL_SUCCESS ? (json_int_t)n : -1);
    printf("platforms %lld\n", (long long)json_integer_value(j));
    json_decref(j);
    return 0;
}
C
got=$("$kitsh" exec --isolate --cc kit "$kit" -- sh -c \
  'for c in gcc as ld; do command -v $c; done; gcc -DCL_TARGET_OPENCL_VERSION=120 "$0/cc-hello.c" -o "$0/cc-hello" -lOpenCL -ljansson && "$0/cc-hello"' "$kit") ||
  fail "the kit's gcc did not build and run a program: $got"
echo "$got"
for c in gcc as ld; do
  grep -qx "$prefix/cc/usr/bin/$c" <<<"$got" || fail "--cc kit runs another $c"
done
grep -qx 'platforms [1-9][0-9]*' <<<"$got" || fail "the program built by the kit's gcc found no platform"
echo "gpu-kit rehearsal passed"
