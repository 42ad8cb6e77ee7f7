#!/usr/bin/env bash
# A kit for building, testing, tuning and benchmarking liboclfuse on a
# machine that reaches no package registry (a borrowed GPU machine).
#
#   tools/gpu-kit.sh fetch DIR          here, online: the Debian packages and the source into DIR
#   tools/gpu-kit.sh run DIR OUT [...]  there: unpack into DIR/prefix, build, test, tune, bench
#   tools/gpu-kit.sh exec [--isolate] DIR -- CMD   CMD in the kit's environment (PATH, libraries, ICDs)
#   tools/gpu-kit.sh import TUNING_JSON [DB]   back here: merge the records into DB
#                                       (default tune/db/builtin.json, compiled into the library)
#
# What the target machine is assumed to have:
# - x86-64 Linux with glibc 2.36 or newer (the kit's programs are Debian 12
#   builds; Ubuntu 24.04's 2.39 qualifies), the C library itself (libc6),
#   libstdc++ and the rest of a minimal Debian (Priority: required and what
#   that needs), bash, coreutils, find, tar and xz;
# - an OpenCL driver: NVIDIA's libnvidia-opencl.so.1, AMD's libamdocl64.so,
#   Intel's libigdrcl.so anywhere under /usr/lib*, /usr/local, /opt, or a file
#   in /etc/OpenCL/vendors;
# - dpkg-deb, or else python3 (the kit then reads the .deb archives itself).
# Not assumed: a compiler, Python, Meson, Ninja, pkg-config, OpenCL headers
# or ICD loader, CLBlast, jansson, check. The kit carries all of them: gcc
# with binutils and the C library's headers (used only when the machine has
# no working C compiler, or with --cc kit), and Python 3.11, which runs the
# kit's Meson (Meson 1.0's Python module needs distutils, gone from 3.12).
# matplotlib is not carried: the bench chart is drawn where some python3 on
# the machine has it.
#
# The package list is the dependency closure of what the build needs, less
# the closure of the packages of Priority "required" (a minimal Debian),
# worked out with apt-cache from this machine's package lists.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
prog=tools/gpu-kit.sh

# What the build, the tests, the tuner and the bench need (meson.build;
# binutils for the lib-deps test's nm; clinfo for the device's facts),
# beyond a minimal system; and the
# compiler, unpacked apart (DIR/prefix/cc) and put on the paths only when the
# machine has no working one, so that a machine's own compiler never sees
# the kit's C library headers.
kit_roots=(
  ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers
  libclblast-dev libjansson-dev check libsubunit-dev
  meson ninja-build pkgconf python3 binutils clinfo
)
cc_roots=(gcc libc6-dev)

die() { echo "gpu-kit: $*" >&2; exit 1; }
say() { echo "gpu-kit: $*" >&2; }
# A download that failed (no network, no mirror) exits 75, so a caller can
# tell it from a fault of the kit.
die_net() { echo "gpu-kit: $* (no network?)" >&2; exit 75; }

usage() {
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  cat <<'EOF'

run options:
  --stage S[,S...]   unpack, build, info, test, tune, bench, or all (default: all, in that order)
  --suites A[,B...]  meson test suites for the test stage (default: unit,gpu-defaults)
  --tune-budget S    seconds for oclfuse-tune (default 120)
  --tune-args "..."  the tuner's arguments besides --db and --budget (default: --dtypes f32,f16,bf16 --shapes bench)
  --bench-args "..." more oclfuse-bench arguments (default: none, every op, dtype and shape)
  --stage-seconds S  the test, tune and bench stages stop after S seconds (default 540)
  --cc auto|system|kit   C compiler: the machine's when it works (auto), or the kit's gcc
  --isolate          PATH holds only the prefix and a few base commands (rehearsal: a
                     machine without the packages, whatever this one has installed)
EOF
}

abspath() { mkdir -p "$1" && (cd "$1" && pwd); }

# ---------------------------------------------------------------- fetch --

# Package names, one a line, of the closure of the arguments (the packages
# apt would install with --no-install-recommends, every alternative taken).
closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "$@" 2>/dev/null |
    grep -v '^ ' | grep -v '^<' | sed 's/:any$//' | grep -v ':' | sort -u
}

cmd_fetch() {
  [ $# -eq 1 ] || die "usage: $prog fetch DIR"
  local dir; dir=$(abspath "$1")
  command -v apt-get >/dev/null || die "fetch needs apt-get (a Debian machine)"
  # Package lists are needed to resolve anything; fetch them once if absent.
  if [ -z "$(apt-cache policy meson 2>/dev/null | sed -n 's/^ *Candidate: *//p' | grep -v none)" ]; then
    say "no package lists: apt-get update"
    apt-get update -qq || die_net "apt-get update failed"
  fi
  local base main cc
  # shellcheck disable=SC2046 # one package name a word
  base=$(closure $(apt-cache dumpavail | awk '/^Package:/{p=$2} /^Priority: required$/{print p}' | sort -u))
  main=$(comm -23 <(closure "${kit_roots[@]}") <(echo "$base"))
  cc=$(comm -23 <(closure "${kit_roots[@]}" "${cc_roots[@]}") <(echo "$base") | comm -23 - <(echo "$main"))
  [ -n "$main" ] && [ -n "$cc" ] || die "empty package list (apt-cache found nothing)"

  mkdir -p "$dir/debs"
  : >"$dir/packages.txt.new"
  # The file name apt-get download gives each candidate (":" of an epoch
  # as "%3a"); a purely virtual name has no record and drops out.
  # Each line: package, file, and where it goes (main or cc).
  apt-cache show --no-all-versions $main $cc 2>/dev/null |
    awk -v cc=" $(echo $cc) " '
      function row() { if (p != "") { gsub(":", "%3a", v)
        print p, p "_" v "_" a ".deb", (index(cc, " " p " ") ? "cc" : "main") }; p="" }
      /^Package:/{p=$2} /^Version:/{v=$2} /^Architecture:/{a=$2} /^$/{row()} END{row()}' |
    sort -u >"$dir/packages.txt.new"
  local p file part missing=()
  while read -r p file part; do
    [ -s "$dir/debs/$file" ] || missing+=("$p")
  done <"$dir/packages.txt.new"
  if [ ${#missing[@]} -gt 0 ]; then
    say "downloading ${#missing[@]} packages into $dir/debs"
    # apt-get download drops privileges to _apt where it can write there
    (cd "$dir/debs" && apt-get download -q "${missing[@]}" >&2) ||
      die_net "apt-get download failed"
  fi
  while read -r p file part; do
    [ -s "$dir/debs/$file" ] || die "$p: $file was not downloaded"
  done <"$dir/packages.txt.new"
  mv "$dir/packages.txt.new" "$dir/packages.txt"

  # The source travels inside the kit, so DIR alone is what to copy. Only
  # files whose content changed are replaced: a build folder made from an
  # earlier copy then rebuilds what changed, as it would in the tree (a
  # file put back as it was, with its old time, would rebuild nothing).
  local new="$dir/src.new" f
  rm -rf "$new" && mkdir -p "$new" "$dir/src"
  if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$src" && git ls-files -z | tar --null --ignore-failed-read -T - -cf -) | tar -xf - -C "$new"
  else
    tar -C "$src" --exclude='./build*' -cf - . | tar -xf - -C "$new"
  fi
  while IFS= read -r -d '' f; do
    if ! cmp -s "$new/$f" "$dir/src/$f"; then
      mkdir -p "$(dirname "$dir/src/$f")"
      cp -P --remove-destination "$new/$f" "$dir/src/$f"
    fi
  done < <(cd "$new" && find . \( -type f -o -type l \) -print0)
  while IFS= read -r -d '' f; do
    [ -e "$new/$f" ] || [ -L "$new/$f" ] || rm -f "$dir/src/$f"
  done < <(cd "$dir/src" && find . \( -type f -o -type l \) -print0)
  rm -rf "$new"
  say "$(wc -l <"$dir/packages.txt") packages, $(du -sh "$dir/debs" | cut -f1), in $dir/debs; source in $dir/src"
  say "on the other machine: $dir/src/tools/gpu-kit.sh run DIR OUT"
}

# ------------------------------------------------------------------ run --

# Extracts a .deb's data into a folder: dpkg-deb where there is one, else
# the ar archive read by Python (Debian 12's data members are tar.xz).
deb_extract() {
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
  else
    python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'!<arch>\n', 'not an ar archive'
off = 8
while off < len(data):
    name = data[off:off + 16].decode().strip().rstrip('/')
    size = int(data[off + 48:off + 58])
    body = data[off + 60:off + 60 + size]
    if name.startswith('data.tar'):
        # as dpkg-deb does: links, absolute ones too, kept as they are
        trusted = {'filter': 'fully_trusted'} if hasattr(tarfile, 'fully_trusted_filter') else {}
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2], **trusted)
        break
    off += 60 + size + (size & 1)
else:
    sys.exit('no data member in ' + sys.argv[1])
PY
  fi
}

stage_unpack() {
  [ -s "$dir/packages.txt" ] || die "$dir/packages.txt missing: run '$prog fetch DIR' first"
  local stamp="$prefix/.kit-packages"
  if [ -f "$stamp" ] && cmp -s "$stamp" "$dir/packages.txt"; then
    return 0
  fi
  say "unpacking $(wc -l <"$dir/packages.txt") packages into $prefix"
  rm -rf "$prefix" && mkdir -p "$prefix"
  local p file part
  while read -r p file part; do
    if [ "$part" = cc ]; then
      deb_extract "$dir/debs/$file" "$ccprefix"
    else
      deb_extract "$dir/debs/$file" "$prefix"
    fi
  done <"$dir/packages.txt"
  # The C library's link script names the non-shared part by its absolute
  # path, which a machine without libc6-dev lacks: point it into the prefix.
  local script="$ccprefix/usr/lib/$triplet/libc.so"
  [ -f "$script" ] && sed -i "s# /usr/lib/$triplet/# $ccprefix/usr/lib/$triplet/#g" "$script"
  # A few links name files of the system by absolute path (the C library's
  # .so links, Python's sitecustomize.py in /etc): where the file is
  # missing the link goes (Python warned at every start of the missing one).
  find "$prefix" -type l -lname '/*' ! -exec test -e {} \; -delete
  # Meson runs under the kit's Python, and so does the build's own
  # regeneration, which calls the script by its path.
  sed -i "1s|^#! */usr/bin/python3.*|#!$prefix/usr/bin/python3|" "$prefix/usr/bin/meson"
  cp "$dir/packages.txt" "$stamp"
}

# The vendor libraries: ICD files naming each found driver by its path, and
# the machine's own ICD files for any other driver.
write_icds() {
  local vendors="$dir/vendors"
  rm -rf "$vendors" && mkdir -p "$vendors"
  local found=() f name
  vendor_dirs=""
  while IFS= read -r f; do
    found+=("$f")
  done < <(find /usr/lib /usr/lib64 /usr/lib32 /usr/local /opt -maxdepth 6 \
             \( -name libnvidia-opencl.so.1 -o -name libamdocl64.so -o -name libigdrcl.so \) \
             \( -type f -o -type l \) 2>/dev/null | sort -u)
  local seen=" "
  for f in "${found[@]}"; do
    local real; real=$(readlink -f "$f")
    case "$seen" in *" $real "*) continue ;; esac
    seen="$seen$real "
    name=$(basename "$f"); name=${name%%.so*}
    echo "$f" >"$vendors/$name.icd"
    # the driver's own libraries (NVIDIA's libcuda.so.1) lie beside it
    vendor_dirs="$vendor_dirs:$(dirname "$f")"
  done
  if [ -d /etc/OpenCL/vendors ]; then
    for f in /etc/OpenCL/vendors/*.icd; do
      [ -f "$f" ] || continue
      local lib; lib=$(head -1 "$f")
      local dup=0 g
      for g in "${found[@]}"; do
        [ "$(basename "$g")" = "$(basename "$lib")" ] && dup=1
      done
      [ $dup = 1 ] || cp "$f" "$vendors/"
    done
  fi
  ls "$vendors"/*.icd >/dev/null 2>&1 || die "no OpenCL driver found (no vendor library, nothing in /etc/OpenCL/vendors)"
}

# The commands a build needs from the machine itself when --isolate hides
# the rest of PATH: what a minimal Debian has.
base_commands=(
  sh bash env cat cp mv rm ln mkdir rmdir ls sed grep awk find sort uniq tr head tail cut wc
  dirname basename readlink realpath tee xargs date uname id touch chmod tar gzip xz
  dpkg-deb ldconfig ldd nproc mktemp stat printf sleep timeout expr od cmp diff true false
  test "[" hostname whoami getconf
)

kit_env() {
  local lib="$prefix/usr/lib/$triplet"
  local path="$prefix/usr/bin"
  if [ "$isolate" = 1 ]; then
    local shim="$dir/shim" c
    rm -rf "$shim" && mkdir -p "$shim"
    for c in "${base_commands[@]}"; do
      local p; p=$(command -v "$c" 2>/dev/null) || continue
      case "$p" in /*) ln -s "$p" "$shim/$c" ;; esac
    done
    path="$path:$shim"
    unset CC CFLAGS LDFLAGS PYTHONHOME PKG_CONFIG LD_LIBRARY_PATH
  else
    path="$path:$PATH"
  fi
  export PATH="$path"
  # The kit's build folder first: its programs find liboclfuse through
  # their run path, which any LD_LIBRARY_PATH entry holding another
  # liboclfuse.so would override (meson test puts the tree's build there).
  export LD_LIBRARY_PATH="$build:$lib:$prefix/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}$vendor_dirs"
  export LIBRARY_PATH="$lib:$prefix/usr/lib"
  export CPATH="$prefix/usr/include:$prefix/usr/include/$triplet"
  export PKG_CONFIG="$prefix/usr/bin/pkgconf"
  export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$prefix/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$prefix"
  unset PKG_CONFIG_PATH
  export PYTHONPATH="$prefix/usr/lib/python3/dist-packages"
  export PYTHONNOUSERSITE=1
  export OCL_ICD_VENDORS="$dir/vendors"
  export OPENCL_VENDOR_PATH="$dir/vendors"
  # The per-machine tuning database stays out of it: records come from
  # OUT/tuning.json alone.
  export XDG_DATA_HOME="$dir/data"
  export OCLF_CACHE_DIR="$dir/program-cache"
  # the environment without the kit's compiler, for pick_cc to go back to
  no_cc_env=("PATH=$PATH" "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" "CPATH=$CPATH" "LIBRARY_PATH=$LIBRARY_PATH")
  [ "$(cat "$dir/cc-choice" 2>/dev/null)" = kit ] && cc_env
  return 0
}

# The kit's compiler on the paths, after the prefix: gcc and binutils, the
# C library's headers and start files.
cc_env() {
  local lib="$ccprefix/usr/lib/$triplet"
  export PATH="$prefix/usr/bin:$ccprefix/usr/bin:${PATH#"$prefix/usr/bin:"}"
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$lib"
  export CPATH="$CPATH:$ccprefix/usr/include:$ccprefix/usr/include/$triplet"
  export LIBRARY_PATH="$LIBRARY_PATH:$lib:$ccprefix/usr/lib"
}

pick_cc() {
  local t="$dir/cc-check"
  mkdir -p "$t"
  printf '#include <math.h>\n#include <pthread.h>\n#include <stdio.h>\nint main(void){printf("%%g\\n", sqrt(2.0));return 0;}\n' >"$t/c.c"
  if [ "$cc_choice" != kit ]; then
    local c p
    export "${no_cc_env[@]}"
    for c in cc gcc; do
      p=$(command -v "$c") || continue
      case "$p" in "$prefix"/*) continue ;; esac # the kit's, from an earlier choice
      if "$p" "$t/c.c" -o "$t/c" -lm -pthread 2>/dev/null && "$t/c" >/dev/null; then
        export CC="$p"
        echo system >"$dir/cc-choice"
        return 0
      fi
    done
    [ "$cc_choice" = system ] && die "no working C compiler on this machine (try --cc kit)"
  fi
  grep -q "$ccprefix" <<<"$PATH" || cc_env
  export CC="$ccprefix/usr/bin/gcc"
  "$CC" "$t/c.c" -o "$t/c" -lm -pthread && "$t/c" >/dev/null || die "the kit's gcc does not work here"
  echo kit >"$dir/cc-choice"
}

stage_build() {
  pick_cc
  say "C compiler: $CC; meson $(meson --version), ninja $(ninja --version)"
  # The Python package's interpreter too: a newer system python3 may lack
  # the distutils that Meson 1.0 asks it for.
  local meson=(meson) opts=(-Dpython3="$prefix/usr/bin/python3")
  # Meson keeps a build folder's compiler and source across
  # reconfigurations: a folder made for others is made anew.
  if [ -f "$build/build.ninja" ] && [ "$(cat "$build/.kit-for" 2>/dev/null)" != "$CC $src" ]; then
    rm -rf "$build"
  fi
  mkdir -p "$build" && echo "$CC $src" >"$build/.kit-for"
  {
    echo "C compiler: $CC"
    if [ -f "$build/build.ninja" ]; then
      "${meson[@]}" setup --reconfigure "${opts[@]}" "$build" "$src"
    else
      "${meson[@]}" setup "${opts[@]}" "$build" "$src"
    fi
    ninja -C "$build"
  } >"$out/build.log" 2>&1 || { tail -30 "$out/build.log" >&2; die "build failed: $out/build.log"; }
  say "built into $build (log: $out/build.log)"
}

stage_info() {
  {
    echo "ICD files in $OCL_ICD_VENDORS:"
    local f
    for f in "$OCL_ICD_VENDORS"/*.icd; do echo "  $(basename "$f"): $(head -1 "$f")"; done
    echo
    "$build/tools/oclfuse-info"
    echo
    "$build/tune/oclfuse-tune" --list
    echo
    # where each op's parameters come from on the first device, at one shape
    "$build/tools/oclfuse-info" --shape 4096x4096
    echo
    clinfo
  } >"$out/info.txt" 2>&1 || { cat "$out/info.txt" >&2; die "oclfuse-info failed: $out/info.txt"; }
  cat "$out/info.txt"
}

stage_test() {
  local args=() s
  IFS=, read -r -a s <<<"$suites"
  for x in "${s[@]}"; do args+=(--suite "$x"); done
  local status=0
  timeout "$stage_seconds" meson test -C "$build" --print-errorlogs \
    --num-processes "$(nproc)" "${args[@]}" >"$out/test.log" 2>&1 || status=$?
  cp "$build/meson-logs/testlog.txt" "$out/testlog.txt" 2>/dev/null || true
  cp "$build/meson-logs/testlog.json" "$out/testlog.json" 2>/dev/null || true
  grep -E '^(Ok|Fail|Skipped|Timeout):' "$out/test.log" >&2 || true
  [ $status = 124 ] && say "the test stage stopped after $stage_seconds s (--stage-seconds)"
  # meson test runs nothing, and passes, for a suite that has no test
  grep -q '^No suitable tests defined' "$out/test.log" && { say "no test in suites $suites"; status=1; }
  [ $status = 0 ] || { say "tests failed: $out/test.log"; return 1; }
}

stage_tune() {
  # Past --stage-seconds the tuner gets SIGINT, on which it finishes the
  # candidate in hand and writes what is done.
  local status=0
  # shellcheck disable=SC2086 # the argument strings are split on purpose
  timeout -s INT -k 120 "$stage_seconds" \
    "$build/tune/oclfuse-tune" --db "$out/tuning.json" --budget "$tune_budget" --resume \
    ${tune_args:---dtypes f32,f16,bf16 --shapes bench} >"$out/tune.log" 2>&1 || status=$?
  if [ $status = 124 ]; then
    say "tuning stopped after $stage_seconds s (--stage-seconds); --stage tune again resumes it"
  elif [ $status != 0 ]; then
    tail -20 "$out/tune.log" >&2; say "tuning failed: $out/tune.log"; return 1
  fi
  say "tuning records in $out/tuning.json (log: $out/tune.log)"
}

# Every op in a process of its own, so that a stage cut short by its time
# keeps the ops done; their JSON arrays are joined into OUT/bench.json.
stage_bench() {
  local bench="$build/tools/oclfuse-bench" ops=() op
  export OCLF_TUNING_DB="$out/tuning.json"
  [ -f "$OCLF_TUNING_DB" ] || unset OCLF_TUNING_DB
  if [[ " $bench_args " == *" --ops "* ]]; then
    ops=(given)
  else
    mapfile -t ops < <("$bench" --help 2>&1 | sed -n '/^operations/,$p' |
                       sed -n 's/^  \([a-z0-9_]\{1,\}\)  .*/\1/p')
  fi
  [ ${#ops[@]} -gt 0 ] || ops=(given)
  rm -rf "$out/bench" && mkdir -p "$out/bench"
  : >"$out/bench.txt"; : >"$out/bench.err"
  local end=$((SECONDS + stage_seconds)) status=0 i=0
  for op in "${ops[@]}"; do
    local left=$((end - SECONDS))
    if [ $left -le 0 ]; then
      say "bench: out of time (--stage-seconds) before $op"
      status=1; break
    fi
    local sel=(); [ "$op" = given ] || sel=(--ops "$op")
    i=$((i + 1))
    # shellcheck disable=SC2086
    timeout "$left" "$bench" --dtypes f32,f16,bf16 --paths fused,unfused,auto "${sel[@]}" \
      --json-file "$out/bench/$(printf %02d $i).json" $bench_args >>"$out/bench.txt" 2>>"$out/bench.err" ||
      { say "bench: $op failed or ran out of time (see $out/bench.err)"; status=1; }
  done
  python3 - "$out/bench.json" "$out"/bench/*.json <<'PY' || status=1
import json, sys
rows = []
for p in sys.argv[2:]:
    try:
        rows += json.load(open(p))
    except (OSError, ValueError):
        pass
json.dump(rows, open(sys.argv[1], 'w'), indent=1)
print(f"gpu-kit: {len(rows)} bench results in {sys.argv[1]}", file=sys.stderr)
PY
  rm -rf "$out/bench"
  cat "$out/bench.txt"
  # The chart needs matplotlib: any python3 of the machine that has it, run
  # with the machine's own libraries.
  local py chart="no python3 with matplotlib here"
  rm -f "$out/bench.png"
  for py in $orig_python /usr/bin/python3; do
    if env PATH="$orig_path" LD_LIBRARY_PATH="$orig_ld" PYTHONPATH= "$py" -c 'import matplotlib' 2>/dev/null; then
      if env PATH="$orig_path" LD_LIBRARY_PATH="$orig_ld" PYTHONPATH= "$py" "$src/tools/plot_bench.py" \
           "$out/bench.json" -o "$out/bench.png" >/dev/null 2>>"$out/bench.err"; then
        chart="$out/bench.png"
      else
        chart="$py tools/plot_bench.py failed (see $out/bench.err)"
      fi
      break
    fi
  done
  say "chart: $chart"
  return $status
}

cmd_run() {
  [ $# -ge 2 ] || die "usage: $prog run DIR OUT [options]"
  dir=$(abspath "$1"); out=$(abspath "$2"); shift 2
  stages=all suites=unit,gpu-defaults tune_budget=120 tune_args="" bench_args=""
  stage_seconds=540 cc_choice=auto isolate=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --stage) stages=$2; shift 2 ;;
      --suites) suites=$2; shift 2 ;;
      --tune-budget) tune_budget=$2; shift 2 ;;
      --tune-args) tune_args=$2; shift 2 ;;
      --bench-args) bench_args=$2; shift 2 ;;
      --stage-seconds) stage_seconds=$2; shift 2 ;;
      --cc) cc_choice=$2; shift 2 ;;
      --isolate) isolate=1; shift ;;
      *) die "unknown option $1 (see $prog --help)" ;;
    esac
  done
  [ "$stages" = all ] && stages=unpack,build,info,test,tune,bench
  prefix="$dir/prefix" ccprefix="$dir/prefix/cc" build="$dir/build" triplet=x86_64-linux-gnu
  orig_path=$PATH orig_ld=${LD_LIBRARY_PATH:-} orig_python=$(command -v python3 || true)
  local st
  IFS=, read -r -a st <<<"$stages"
  for s in "${st[@]}"; do
    case "$s" in unpack|build|info|test|tune|bench) ;; *) die "unknown stage $s" ;; esac
  done
  # Every stage needs the prefix; unpacking is skipped when it is current.
  stage_unpack
  write_icds
  kit_env
  # A failed build or info stage ends the run; a failed test, tune or bench
  # stage lets the next ones run (their results are worth having from a
  # machine lent for minutes), and the run exits 1 naming them.
  local failed=()
  for s in "${st[@]}"; do
    case "$s" in
      unpack) ;;
      build) stage_build ;;
      info) stage_info ;;
      test|tune|bench) "stage_$s" || failed+=("$s") ;;
      *) die "unknown stage $s" ;;
    esac
  done
  [ ${#failed[@]} = 0 ] || die "failed: ${failed[*]} (logs in $out)"
}

cmd_exec() {
  isolate=0
  [ "${1:-}" = --isolate ] && { isolate=1; shift; }
  [ $# -ge 3 ] && [ "$2" = -- ] || die "usage: $prog exec [--isolate] DIR -- CMD [ARGS]"
  dir=$(abspath "$1"); shift 2
  prefix="$dir/prefix" ccprefix="$dir/prefix/cc" build="$dir/build" triplet=x86_64-linux-gnu
  [ -f "$prefix/.kit-packages" ] || die "$prefix is not unpacked: run '$prog run DIR OUT --stage unpack'"
  write_icds
  kit_env
  exec "$@"
}

# Merges a tuning database (the run's OUT/tuning.json) into DB through the
# library's own merge, so a record replaces the one of the same device, op,
# dtype and shape.
cmd_import() {
  [ $# -ge 1 ] && [ $# -le 2 ] || die "usage: $prog import TUNING_JSON [DB]"
  local from=$1 db=${2:-$src/tune/db/builtin.json}
  local lib="${OCLF_BUILD_DIR:-$src/build}/liboclfuse.so"
  [ -f "$lib" ] || die "$lib not found: build first (tools/build.sh)"
  python3 - "$lib" "$from" "$db" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.oclf_last_error.restype = ctypes.c_char_p
lib.oclf_last_error.argtypes = [ctypes.c_void_p]
n = ctypes.c_size_t()
for path in (sys.argv[2],):
    if lib.oclf_tuning_db_check(path.encode(), ctypes.byref(n)) != 0:
        sys.exit('gpu-kit: ' + lib.oclf_last_error(None).decode())
text = open(sys.argv[2]).read()
if lib.oclf_tuning_db_merge(None, sys.argv[3].encode(), text.encode()) != 0:
    sys.exit('gpu-kit: ' + lib.oclf_last_error(None).decode())
lib.oclf_tuning_db_check(sys.argv[3].encode(), ctypes.byref(m := ctypes.c_size_t()))
print(f'gpu-kit: {n.value} records merged into {sys.argv[3]} ({m.value} records now)', file=sys.stderr)
PY
  rm -f "$db.lock"
}

case "${1:-}" in
  fetch) shift; cmd_fetch "$@" ;;
  run) shift; cmd_run "$@" ;;
  exec) shift; cmd_exec "$@" ;;
  import) shift; cmd_import "$@" ;;
  -h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac
