#!/usr/bin/env bash
# A kit for building, testing, tuning and benchmarking liboclfuse on a
# machine that reaches no package registry (a borrowed GPU machine).
#
#   tools/gpu-kit.sh fetch --lean DIR   here, online: the packages beyond a minimal system, no compiler
#   tools/gpu-kit.sh fetch --cc DIR     here, online: the compiler's packages (gcc, binutils, libc6-dev)
#   tools/gpu-kit.sh fetch DIR          both, and a copy of the source in DIR/src
#   tools/gpu-kit.sh run --profile lease DIR OUT   there: one capped run of under 9 minutes
#                                       (probe, build, tests, bench, layer, tune, program binaries)
#   tools/gpu-kit.sh run DIR OUT [...]  there: unpack into DIR/prefix, build, test, tune, bench
#   tools/gpu-kit.sh exec [--isolate] [--cc kit] DIR -- CMD   CMD in the kit's environment
#   tools/gpu-kit.sh caps               the lease profile's stage caps in seconds, and their total
#   tools/gpu-kit.sh import FROM [DB]   back here: FROM a lease's OUT folder or archive (records into
#                                       DB, default tune/db/builtin.json; bench JSON and a dated note
#                                       into docs/notes), or a tuning.json alone
#
# What the target machine is assumed to have:
# - x86-64 Linux with glibc 2.36 or newer (the kit's programs are Debian 12
#   builds; Ubuntu 24.04's 2.39 qualifies), the C library itself (libc6),
#   libstdc++ and the rest of a minimal Debian (Priority: required and what
#   that needs), bash, coreutils, find, tar, gzip and xz;
# - a C compiler with its assembler and linker, unless the compiler's
#   packages came along (fetch --cc, or a plain fetch);
# - an OpenCL driver: NVIDIA's libnvidia-opencl.so.1, AMD's libamdocl64.so,
#   Intel's libigdrcl.so anywhere under /usr/lib*, /usr/local, /opt, or a file
#   in /etc/OpenCL/vendors (without one the lease profile still reports what
#   the machine has, then stops);
# - dpkg-deb, or else python3 (the kit then reads the .deb archives itself).
# Not assumed: Python, Meson, Ninja, pkg-config, OpenCL headers or ICD
# loader, CLBlast, jansson, check. The kit carries all of them, Python 3.11
# among them, which runs the kit's Meson (Meson 1.0's Python module needs
# distutils, gone from 3.12). matplotlib is not carried: the bench chart is
# drawn where some python3 on the machine has it.
#
# The package list is the dependency closure of what the build needs, less
# the closure of the packages of Priority "required" (a minimal Debian),
# worked out with apt-cache from this machine's package lists.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
prog=tools/gpu-kit.sh

# What the build, the tests, the tuner and the bench need (meson.build;
# clinfo for the device's facts), beyond a minimal system and a C compiler;
# and the compiler (gcc with binutils and the C library's headers),
# fetched apart and unpacked apart (DIR/prefix/cc), put on the paths only
# when the machine has no working one, so that a machine's own compiler
# never sees the kit's C library headers.
kit_roots=(
  ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers
  libclblast-dev libjansson-dev check libsubunit-dev
  meson ninja-build pkgconf python3 clinfo
)
cc_roots=(gcc libc6-dev binutils)

die() { echo "gpu-kit: $*" >&2; exit 1; }
say() { echo "gpu-kit: $*" >&2; }
# A download that failed (no network, no mirror) exits 75, so a caller can
# tell it from a fault of the kit.
die_net() { echo "gpu-kit: $* (no network?)" >&2; exit 75; }

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  cat <<'EOF'

run options:
  --profile lease    the lease profile (docs/gpu-kit.md): fixed stages, each capped, OUT
                     holds at most 6 files; the options below then do not apply, but for
                     --cc and --isolate
  --stage S[,S...]   unpack, build, info, test, tune, bench, or all (default: all, in that order)
  --suites A[,B...]  meson test suites for the test stage (default: unit,gpu-defaults)
  --tune-budget S    seconds for oclfuse-tune (default 120)
  --tune-args "..."  the tuner's arguments besides --db and --budget (default: --dtypes f32,f16,bf16 --shapes bench)
  --bench-args "..." more oclfuse-bench arguments (default: none, every op, dtype and shape)
  --stage-seconds S  the test, tune and bench stages stop after S seconds (default 540)
  --cc auto|system|kit   C compiler: the machine's when it works (auto), or the kit's gcc
  --isolate          PATH holds only the prefix and a few base commands (rehearsal: a
                     machine without the packages, whatever this one has installed)

import options:
  --notes DIR        where a lease's bench JSON and dated note go (default docs/notes)
  --cpu BENCH_JSON   the CPU's bench rows for the note (default build/bench.json)
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

# Resolves a root list into DIR/LIST (package, file, part a line) and
# downloads what DIR/DEBS lacks. $base is the minimal system's closure.
fetch_part() {
  local dir=$1 list=$2 debs=$3 part=$4; shift 4
  local names="$*"
  [ -n "$names" ] || die "empty package list for $list (apt-cache found nothing)"
  mkdir -p "$dir/$debs"
  # The file name apt-get download gives each candidate (":" of an epoch
  # as "%3a"); a purely virtual name has no record and drops out.
  # shellcheck disable=SC2086 # one package name a word
  apt-cache show --no-all-versions $names 2>/dev/null |
    awk -v part="$part" '
      function row() { if (p != "") { gsub(":", "%3a", v); print p, p "_" v "_" a ".deb", part }; p="" }
      /^Package:/{p=$2} /^Version:/{v=$2} /^Architecture:/{a=$2} /^$/{row()} END{row()}' |
    sort -u >"$dir/$list.new"
  local p file x missing=()
  while read -r p file x; do
    [ -s "$dir/$debs/$file" ] || missing+=("$p")
  done <"$dir/$list.new"
  if [ ${#missing[@]} -gt 0 ]; then
    say "downloading ${#missing[@]} packages into $dir/$debs"
    # apt-get download drops privileges to _apt where it can write there
    (cd "$dir/$debs" && apt-get download -q "${missing[@]}" >&2) ||
      die_net "apt-get download failed"
  fi
  # Only the listed files stay: a kit fetched again after the package lists
  # moved on carries no stale version along.
  local keep=" "
  while read -r p file x; do
    [ -s "$dir/$debs/$file" ] || die "$p: $file was not downloaded"
    keep="$keep$file "
  done <"$dir/$list.new"
  for file in "$dir/$debs"/*.deb; do
    case "$keep" in *" $(basename "$file") "*) ;; *) rm -f "$file" ;; esac
  done
  mv "$dir/$list.new" "$dir/$list"
  say "$(wc -l <"$dir/$list") packages, $(du -sh "$dir/$debs" | cut -f1), in $dir/$debs ($list)"
}

cmd_fetch() {
  local what=all
  case "${1:-}" in --lean) what=lean; shift ;; --cc) what=cc; shift ;; esac
  [ $# -eq 1 ] || die "usage: $prog fetch [--lean|--cc] DIR"
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
  if [ "$what" != cc ]; then
    # shellcheck disable=SC2086
    fetch_part "$dir" packages.txt debs main $main
  fi
  if [ "$what" != lean ]; then
    cc=$(comm -23 <(closure "${kit_roots[@]}" "${cc_roots[@]}") <(echo "$base") | comm -23 - <(echo "$main"))
    # shellcheck disable=SC2086
    fetch_part "$dir" packages-cc.txt debs-cc cc $cc
  fi
  if [ "$what" = all ]; then
    copy_source "$dir"
    say "on the other machine: $dir/src/tools/gpu-kit.sh run DIR OUT"
  else
    say "on the other machine, from the tree: tools/gpu-kit.sh run --profile lease DIR OUT (docs/gpu-kit.md)"
  fi
}

# The source travels inside the kit (a plain fetch), so DIR alone is what
# to copy. Only files whose content changed are replaced: a build folder
# made from an earlier copy then rebuilds what changed, as it would in the
# tree (a file put back as it was, with its old time, would rebuild nothing).
copy_source() {
  local dir=$1 new="$1/src.new" f
  rm -rf "$new" && mkdir -p "$new" "$dir/src"
  if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$src" && git ls-files -z | tar --null --ignore-failed-read -T - -cf -) | tar -xf - -C "$new"
  else
    tar -C "$src" --exclude='./build*' --exclude=./kit -cf - . | tar -xf - -C "$new"
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
  say "source in $dir/src"
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

# The package lines of the kit: the main list, then the compiler's if fetched.
kit_lists() {
  cat "$dir/packages.txt"
  if [ -f "$dir/packages-cc.txt" ]; then cat "$dir/packages-cc.txt"; fi
}

stage_unpack() {
  [ -s "$dir/packages.txt" ] || die "$dir/packages.txt missing: run '$prog fetch --lean DIR' first"
  local stamp="$prefix/.kit-packages"
  if [ -f "$stamp" ] && kit_lists | cmp -s "$stamp" -; then
    return 0
  fi
  say "unpacking $(kit_lists | wc -l) packages into $prefix"
  rm -rf "$prefix" && mkdir -p "$prefix"
  local p file part
  while read -r p file part; do
    deb_extract "$dir/debs/$file" "$prefix"
  done <"$dir/packages.txt"
  if [ -s "$dir/packages-cc.txt" ]; then
    while read -r p file part; do
      deb_extract "$dir/debs-cc/$file" "$ccprefix"
    done <"$dir/packages-cc.txt"
  fi
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
  kit_lists >"$stamp"
}

# Where vendor libraries are looked for, and the machine's ICD folder
# (OCLF_KIT_LIB_ROOTS and OCLF_KIT_SYSTEM_ICDS change them: the rehearsal
# of a machine without a driver).
lib_roots() {
  local r
  for r in ${OCLF_KIT_LIB_ROOTS:-/usr/lib /usr/lib64 /usr/lib32 /usr/local /opt}; do
    [ -d "$r" ] && echo "$r"
  done
  return 0
}
system_icds=${OCLF_KIT_SYSTEM_ICDS:-/etc/OpenCL/vendors}

# The driver's libraries under the roots, one path a line, into
# DIR/libraries.txt: one walk (at most 30 s) serves the ICD files and the
# probe of a run. Python's and Node's package trees, which hold no driver and may
# hold a hundred thousand files, are not entered.
find_libraries() {
  lib_roots | timeout 30 xargs -r -I{} find {} -maxdepth 6 \
    \( -name site-packages -o -name dist-packages -o -name node_modules -o -name 'python3*' \) -prune -o \
    \( -name 'libnvidia-*.so*' -o -name 'libamdocl64.so' -o -name 'libigdrcl.so' -o -name 'libOpenCL.so*' \
       -o -name 'libcuda.so*' -o -name 'libamdhip64.so*' -o -name 'libze_loader.so*' -o -name 'libigdgmm.so*' \) \
    \( -type f -o -type l \) -print 2>/dev/null | sort -u >"$dir/libraries.txt" || true
}

# The vendor libraries: ICD files naming each found driver by its path, and
# the machine's own ICD files for any other driver.
write_icds() {
  local vendors="$dir/vendors"
  rm -rf "$vendors" && mkdir -p "$vendors"
  local found=() f name
  vendor_dirs=""
  find_libraries
  while IFS= read -r f; do
    found+=("$f")
  done < <(grep -E '/(libnvidia-opencl\.so\.1|libamdocl64\.so|libigdrcl\.so)$' "$dir/libraries.txt" || true)
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
  if [ -d "$system_icds" ]; then
    for f in "$system_icds"/*.icd; do
      [ -f "$f" ] || continue
      local lib; lib=$(head -1 "$f")
      local dup=0 g
      for g in "${found[@]}"; do
        [ "$(basename "$g")" = "$(basename "$lib")" ] && dup=1
      done
      [ $dup = 1 ] || cp "$f" "$vendors/"
    done
  fi
  ls "$vendors"/*.icd >/dev/null 2>&1
}

# The commands a build needs from the machine itself when --isolate hides
# the rest of PATH: what a minimal Debian has.
base_commands=(
  sh bash env cat cp mv rm ln mkdir rmdir ls sed grep awk find sort uniq tr head tail cut wc
  dirname basename readlink realpath tee xargs date uname id touch chmod tar gzip xz
  dpkg-deb ldconfig ldd nproc mktemp stat printf sleep timeout expr od cmp diff true false
  test "[" hostname whoami getconf du comm seq kill
)
# ... and the machine's compiler, where the kit's is not the one chosen:
# the driver and the assembler, linker and archiver it and Meson call.
toolchain_commands=(cc gcc c99 as ld ld.bfd ld.gold ar nm ranlib readelf strip objdump objcopy)

kit_env() {
  local lib="$prefix/usr/lib/$triplet"
  local path="$prefix/usr/bin"
  if [ "$isolate" = 1 ]; then
    local shim="$dir/shim" c
    rm -rf "$shim" && mkdir -p "$shim"
    local cmds=("${base_commands[@]}")
    [ "${cc_choice:-auto}" = kit ] || cmds+=("${toolchain_commands[@]}")
    for c in "${cmds[@]}"; do
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
  if [ "${cc_choice:-}" = kit ] || [ "$(cat "$dir/cc-choice" 2>/dev/null)" = kit ]; then cc_env; fi
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
# The bench JSON of several runs (an op each) merged into $1, one array: an
# op cut by its time limit keeps the rows it finished (oclfuse-bench writes
# each row as it goes, so only the closing bracket is missing).
merge_bench_json() {
  python3 - "$@" <<'PY'
import json, sys
rows = []
for p in sys.argv[2:]:
    try:
        text = open(p).read()
    except OSError:
        continue
    try:
        rows += json.loads(text)
    except ValueError:
        # an op cut by its time limit: the rows it finished, without the
        # closing bracket
        try:
            rows += json.loads(text.rstrip().rstrip(',') + ']')
        except ValueError:
            pass
json.dump(rows, open(sys.argv[1], 'w'), indent=1)
print(f"gpu-kit: {len(rows)} bench results in {sys.argv[1]}", file=sys.stderr)
PY
}

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
  merge_bench_json "$out/bench.json" "$out"/bench/*.json || status=1
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

# ---------------------------------------------------------------- lease --
#
# The lease profile: one command of at most 10 minutes on a lent machine.
# Every stage runs in a process group of its own under `timeout`, capped so
# that the caps add up to under 9 minutes (lease_caps); after each one
# OUT is refreshed (lease_publish), so whatever finished comes back if a
# later stage, or the command itself, is cut. OUT holds at most six files:
# summary.txt, probe.txt, bench.json, bench-tuned.json, tuning.json and
# lease.tar.gz (every log and result, the program binaries among them).

# Stage caps in seconds, in the order the stages run. They add up to 500;
# with each stage's 3 s to stop after its cap and the publishing between
# stages the whole stays under 540 s (lease_deadline cuts later caps short
# when earlier stages ran long).
lease_stages=(unpack probe build matrix test bench layer tune tuned binaries)
lease_caps=(unpack=20 probe=15 build=95 matrix=15 test=80 bench=95 layer=45 tune=70 tuned=55 binaries=10)
lease_deadline=${OCLF_KIT_DEADLINE:-525}

# The cap of stage $1: its default, scaled by OCLF_KIT_CAP_SCALE (percent),
# or as OCLF_KIT_CAPS sets it ("bench=30,tune=10").
lease_cap() {
  local kv cap=0
  for kv in "${lease_caps[@]}"; do [ "${kv%%=*}" = "$1" ] && cap=${kv#*=}; done
  cap=$((cap * ${OCLF_KIT_CAP_SCALE:-100} / 100))
  local over
  IFS=, read -r -a over <<<"${OCLF_KIT_CAPS:-}"
  for kv in "${over[@]}"; do [ "${kv%%=*}" = "$1" ] && cap=${kv#*=}; done
  [ "$cap" -ge 1 ] || cap=1
  echo "$cap"
}

# The machine's own tools, with the machine's own PATH and libraries (the
# kit's libssl and Python stay out of nvidia-smi's way).
machine() { env PATH="$orig_path" LD_LIBRARY_PATH="$orig_ld" PYTHONPATH= "$@"; }

lease_unpack() { stage_unpack; }

# What the machine is and has, before anything is built: the driver's
# libraries, its tools' view of the GPU, the CUDA toolkit, the ICD files,
# and clinfo through the kit's loader. machine.txt keeps the few facts the
# summary repeats; probe-status says whether a build is worth running.
lease_probe() {
  # a probe reports what fails rather than stopping at it
  set +e +o pipefail
  local f p="$ldir/probe.txt" m="$ldir/machine.txt"
  : >"$m"
  fact() { printf '%s=%s\n' "$1" "$2" >>"$m"; }
  fact cpu "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  {
    echo "== machine"
    date -u '+%Y-%m-%d %H:%M:%S UTC'
    uname -srm
    sed -n 's/^cpu=//p' "$m"
    echo
    echo "== GPU tools"
    for f in nvidia-smi rocm-smi amd-smi xpu-smi nvcc clinfo; do
      echo "$f: $(machine sh -c "command -v $f" || echo none)"
    done
    if machine sh -c 'command -v nvidia-smi' >/dev/null; then
      machine nvidia-smi -L
      machine nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.memory,compute_cap --format=csv
      machine nvidia-smi | head -12
    fi
    if machine sh -c 'command -v rocm-smi' >/dev/null; then machine rocm-smi --showproductname; fi
    echo
    echo "== CUDA"
    if machine sh -c 'command -v nvcc' >/dev/null; then machine nvcc --version | tail -2; fi
    ls -d /usr/local/cuda* 2>/dev/null || true
    grep -A2 '"cuda"' /usr/local/cuda/version.json 2>/dev/null || true
    echo
    echo "== OpenCL and driver libraries"
    grep -E '/(libnvidia-opencl|libnvidia-ptxjitcompiler|libamdocl64|libigdrcl|libOpenCL|libcuda|libamdhip64|libze_loader)\.so' \
      "$dir/libraries.txt"
    if [ -d /usr/local/nvidia ]; then
      echo "/usr/local/nvidia:"
      find /usr/local/nvidia -maxdepth 3 -name '*.so*' 2>/dev/null | sed 's|.*/||' | sort | tr '\n' ' '
      echo
    fi
    echo "$system_icds:"
    for f in "$system_icds"/*.icd; do [ -f "$f" ] && echo "  $f: $(head -1 "$f")"; done
    echo "ICD files the kit wrote ($dir/vendors):"
    for f in "$dir"/vendors/*.icd; do [ -f "$f" ] && echo "  $(basename "$f"): $(head -1 "$f")"; done
    ls -l /dev/nvidia* /dev/kfd /dev/dri 2>&1 | head -12
    echo
  } >"$p" 2>&1
  # The facts the summary repeats, from what was found above.
  local gpu cuda libs drv
  gpu=$(machine nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || true)
  [ -n "$gpu" ] || gpu=$(machine rocm-smi --showproductname 2>/dev/null | sed -n 's/.*Card [Ss]eries:[[:space:]]*//p' | head -1 || true)
  fact gpu "${gpu:-none named (no nvidia-smi or rocm-smi answer)}"
  cuda=$(machine nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1 || true)
  [ -z "$cuda" ] && machine sh -c 'command -v nvcc' >/dev/null &&
    cuda=$(machine nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/CUDA \1 (nvcc)/p')
  fact cuda "${cuda:-none found}"
  libs=$(grep -E '/(libnvidia-opencl\.so\.1|libamdocl64\.so|libigdrcl\.so)$' "$dir/libraries.txt" | tr '\n' ' ')
  fact opencl_libraries "${libs:-none}"
  # (not the CUDA toolkit's link-time stubs of libcuda)
  drv=$(grep -E '/(libcuda|libnvidia-[^/]*|libamdhip64|libigdgmm)\.so' "$dir/libraries.txt" | grep -v '/stubs/' |
    sed 's|.*/||; s|\.so.*||' | sort -u | tr '\n' ' ')
  fact driver_libraries "${drv:-none}"
  fact icds "$(cd "$dir/vendors" 2>/dev/null && ls ./*.icd 2>/dev/null | sed 's|^\./||' | tr '\n' ' ')"
  if ! ls "$dir"/vendors/*.icd >/dev/null 2>&1; then
    echo "== no vendor OpenCL library and no ICD file: the lease stops here" >>"$p"
    echo no-driver >"$ldir/probe-status"
    return 0
  fi
  {
    echo "== clinfo (the kit's ICD loader, $OCL_ICD_VENDORS)"
    clinfo 2>&1 || true
  } >>"$p"
  local n
  n=$(sed -n 's/^Number of platforms[[:space:]]*\([0-9]*\).*/\1/p' "$p" | head -1)
  fact platforms "${n:-unknown}"
  if [ "${n:-0}" = 0 ]; then
    # the loader's own account of each ICD file it tried
    { echo; echo "== clinfo -l with OCL_ICD_DEBUG=15"; OCL_ICD_DEBUG=15 clinfo -l 2>&1 | head -60 || true; } >>"$p"
    echo no-platform >"$ldir/probe-status"
    return 0
  fi
  {
    echo
    echo "== the extensions the library looks for, per device"
    grep -E '^ *(Device Name|Device OpenCL C Version|Max compute units|Max clock frequency|Local memory size|Global memory size|Device Extensions)' "$p" |
      sed 's/\(Device Extensions\)[[:space:]]*.*/\1: see below/'
    for f in cl_khr_fp16 cl_khr_fp64 cl_khr_subgroups cl_khr_device_uuid cl_nv_device_attribute_query \
             cl_intel_subgroups cl_intel_required_subgroup_size cl_amd_device_attribute_query; do
      if grep -q "$f" "$p"; then echo "  $f: yes"; else echo "  $f: no"; fi
    done
  } >>"$p.ext"
  cat "$p.ext" >>"$p" && rm -f "$p.ext"
  echo ok >"$ldir/probe-status"
}

lease_build() {
  out=$ldir stage_build
  # The library's own view of the device: the facts it reads, its quirk
  # defines and build options, and where each op's parameters come from.
  {
    echo
    echo "== oclfuse-info (the library's view)"
    "$build/tools/oclfuse-info" 2>&1 || true
    echo
    "$build/tools/oclfuse-info" --shape 4096x4096 2>&1 || true
  } >>"$ldir/probe.txt"
}

# The matrix-unit and sub-group instructions (cl/mma.h) in each form the
# device builds, checked lane by lane against a host product: first, so
# that a short lease still answers whether the instructions and their
# emulation agree.
lease_matrix() {
  "$build/tools/oclfuse-mma-probe" --cl "$src/cl" >"$ldir/matrix.txt" 2>&1
}

# The suites' own limit ends them 5 s before the stage's cap, so that the
# logs are copied; meson's console lines, unbuffered, count what finished.
lease_test() {
  PYTHONUNBUFFERED=1 out=$ldir suites=${OCLF_KIT_SUITES:-gpu-defaults} \
    stage_seconds=$((${stage_cap:-600} > 10 ? ${stage_cap:-600} - 5 : 5)) stage_test
}

# The bench's rows: op|shapes|dtypes a line. The memory-bound ops at their
# out-of-cache shape for this device's last-level cache (oclfuse-bench
# --list-shapes), then paged decode, prefill attention and the GEMMs.
lease_bench_jobs() {
  local jobs="$ldir/bench-jobs.txt"
  [ -s "$jobs" ] && return 0
  if [ "${OCLF_KIT_LEASE_SIZES:-}" = small ]; then
    # a rehearsal on a CPU device: the same stages at shapes it runs in seconds
    printf '%s\n' 'rms_norm|64x256|f32,f16' 'act_and_mul|16x256|f32' \
      'attention_paged|2x1x64x4x2x16x16|f16' 'linear|32x32x32|f32' >"$jobs.new"
  else
    local mem_ops=rms_norm,add_rms_norm,layer_norm,act_and_mul,rotary_embedding,qk_norm_rope,cross_entropy,linear,linear_q
    "$build/tools/oclfuse-bench" --list-shapes --ops "$mem_ops" --dtypes f16 >"$ldir/bench-shapes.txt"
    awk '/out of cache$/ && !seen[$1]++ { print $1 "|" $3 "|f16,bf16,f32" }' "$ldir/bench-shapes.txt" >"$jobs.new"
    printf '%s\n' 'attention_paged|16x1x4096x32x8x128x16,1x1x32768x32x8x128x16|f16,bf16,f32' \
      'attention|1x2048x2048x32x8x128|f16,bf16,f32' \
      'linear|1024x1024x1024,2048x2048x2048,4096x4096x4096|f16,bf16,f32' >>"$jobs.new"
  fi
  mv "$jobs.new" "$jobs"
}

# One bench run over the jobs, an op per process (a job cut by the stage's
# cap loses only itself) of at most OCLF_KIT_JOB_SECONDS (30: one slow op
# leaves time to the next), each op with a program cache of its own (the
# binaries stage takes the driver's binaries from there). $1: untuned, or
# tuned (the tuning stage's records as the database).
lease_bench_run() {
  local tag=$1 name=bench
  [ "$tag" = tuned ] && name="bench-tuned"
  unset OCLF_TUNING_DB
  if [ "$tag" = tuned ]; then
    [ -s "$ldir/tuning.json" ] || { say "no tuning records: nothing to bench on them"; return 1; }
    export OCLF_TUNING_DB="$ldir/tuning.json"
  fi
  lease_bench_jobs
  local parts="$ldir/$name.parts" i=0 op shapes dtypes status=0
  rm -rf "$parts" && mkdir -p "$parts"
  : >"$ldir/$name.txt"; : >"$ldir/$name.err"
  while IFS='|' read -r op shapes dtypes; do
    i=$((i + 1))
    say "$name: $op $shapes $dtypes"
    OCLF_CACHE_DIR="$dir/program-cache/$op" timeout -k 2 "${OCLF_KIT_JOB_SECONDS:-30}" \
      "$build/tools/oclfuse-bench" --ops "$op" --shapes "$shapes" \
      --dtypes "$dtypes" --paths fused,unfused,auto --min-time "${OCLF_KIT_MIN_TIME:-0.1}" --no-verify \
      --json-file "$parts/$(printf %02d $i).json" >>"$ldir/$name.txt" 2>>"$ldir/$name.err" ||
      { say "$name: $op failed (see $name.err)"; status=1; }
    merge_bench_json "$ldir/$name.json" "$parts"/*.json
  done <"$ldir/bench-jobs.txt"
  return $status
}

lease_bench() { lease_bench_run untuned; }
lease_tuned() { lease_bench_run tuned; }

# The decoder layer (one of Llama-3-8B's sizes, f16: every step's figures
# are per layer, and one layer's weights are set up in half the time of
# two): batch 1 with a 512-token prompt, then batch 16 with 32 tokens each
# (a 512-token prefill too), 8 decode steps each.
lease_layer() {
  local sizes=(--layers 1) status=0
  [ "${OCLF_KIT_LEASE_SIZES:-}" = small ] &&
    sizes=(--layers 1 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 --mlp 512)
  local b p
  for b in 1 16; do
    p=512; [ $b = 16 ] && p=32
    [ "${OCLF_KIT_LEASE_SIZES:-}" = small ] && p=16
    # each run at most half the stage, so that batch 16 has its turn
    OCLF_CACHE_DIR="$dir/program-cache/layer" timeout -k 2 $((${stage_cap:-45} / 2 - 1)) \
      "$build/tools/oclfuse-layer" "${sizes[@]}" \
      --batch $b --prefill $p --decode 8 --repeat 3 --json >"$ldir/layer-b$b.json" 2>>"$ldir/layer.err" ||
      { say "oclfuse-layer --batch $b failed (see layer.err)"; status=1; }
  done
  return $status
}

# About a minute of tuning over the layer's shapes in f16 (decode at batch 1
# and 16, the 512-token prefill); the tuner's own budget (OCLF_KIT_TUNE_BUDGET,
# else 15 s less than the cap, for the job in hand to finish) ends it
# before the stage's cap, whose SIGINT would make it write what is done.
lease_tune() {
  local cap budget args=(--shapes layer --dtypes f16)
  cap=${stage_cap:-$(lease_cap tune)}
  budget=${OCLF_KIT_TUNE_BUDGET:-$((cap - 15))}; [ "$budget" -ge 3 ] || budget=3
  [ "${OCLF_KIT_LEASE_SIZES:-}" = small ] && args=(--ops rms_norm --dtypes f32 --shapes 64x256)
  OCLF_CACHE_DIR="$dir/program-cache/tune" "$build/tune/oclfuse-tune" --db "$ldir/tuning.json" \
    --budget "$budget" --resume "${args[@]}" >"$ldir/tune.log" 2>&1
}

# The driver's binaries of the programs each benched op built (PTX on
# NVIDIA), out of the per-op program caches: the cache file's payload after
# its header, named .ptx where it is text with .entry lines, else .bin.
lease_binaries() {
  python3 - "$dir/program-cache" "$ldir/binaries" <<'PY'
import glob, os, re, shutil, sys
cache, dest = sys.argv[1:3]
HEADER = 56                    # oclf_cache_header: magic, format, key, size, checksum
PER_OP, TOTAL = 8, 12 << 20    # files per op, bytes in all
shutil.rmtree(dest, ignore_errors=True)
os.makedirs(dest)
index, total = [], 0
for opdir in sorted(glob.glob(os.path.join(cache, '*'))):
    op = os.path.basename(opdir)
    files = sorted(glob.glob(os.path.join(opdir, '*.bin')), key=os.path.getmtime)
    for n, f in enumerate(files[:PER_OP]):
        data = open(f, 'rb').read()[HEADER:]
        if total + len(data) > TOTAL:
            index.append(f'{op}\t{os.path.basename(f)}\t{len(data)}\tleft out: over {TOTAL >> 20} MiB in all')
            continue
        entries = re.findall(rb'\.entry\s+([A-Za-z_][A-Za-z0-9_]*)', data)
        ext = 'ptx' if entries or data.lstrip().startswith(b'//') else 'bin'
        os.makedirs(os.path.join(dest, op), exist_ok=True)
        name = f'{op}/{n:02d}.{ext}'
        open(os.path.join(dest, name), 'wb').write(data)
        total += len(data)
        index.append(f'{name}\t{len(data)}\t' + ' '.join(e.decode() for e in entries))
open(os.path.join(dest, 'index.txt'), 'w').write('\n'.join(index) + '\n')
print(f'gpu-kit: {len(index)} program binaries, {total} bytes, in {dest}', file=sys.stderr)
PY
}

# summary.txt: the machine, each stage's outcome and time, and the
# headline figures of what finished.
lease_summary() {
  local py=python3
  [ -x "$prefix/usr/bin/python3" ] || py=$orig_python
  if [ -z "$py" ]; then
    { echo "liboclfuse GPU kit, lease profile (no python3 for the summary)"; cat "$ldir/machine.txt" "$ldir/stages.tsv" 2>/dev/null; }
    return 0
  fi
  env LD_LIBRARY_PATH="$prefix/usr/lib/$triplet${orig_ld:+:$orig_ld}" PYTHONPATH= \
    "$py" - "$ldir" "$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY'
import glob, json, os, re, sys
ldir, commit = sys.argv[1:3]

def load(name):
    try:
        with open(os.path.join(ldir, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

facts = {}
if os.path.exists(os.path.join(ldir, 'machine.txt')):
    for line in open(os.path.join(ldir, 'machine.txt')):
        k, _, v = line.rstrip('\n').partition('=')
        facts[k] = v
print('liboclfuse GPU kit, lease profile')
print(f"run: {open(os.path.join(ldir, 'started')).read().strip()}, commit {commit}")
for k in ('cpu', 'gpu', 'cuda', 'opencl_libraries', 'driver_libraries', 'icds', 'platforms'):
    if k in facts:
        print(f'{k.replace("_", " ")}: {facts[k]}')
status = open(os.path.join(ldir, 'probe-status')).read().strip() if os.path.exists(os.path.join(ldir, 'probe-status')) else ''
if status == 'no-driver':
    print('STOPPED after the probe: no vendor OpenCL library (libnvidia-opencl.so.1, libamdocl64.so,\n'
          'libigdrcl.so) and no file in /etc/OpenCL/vendors; the driver libraries above are what\n'
          'the machine has (probe.txt lists every file found)')
elif status == 'no-platform':
    print('STOPPED after the probe: the ICD loader found no OpenCL platform through the files above\n'
          '(probe.txt ends with the loader\'s own account, OCL_ICD_DEBUG=15)')
print()
print(f"{'stage':<10} {'result':<22} {'seconds':>7} {'cap':>5}")
total = 0
if os.path.exists(os.path.join(ldir, 'stages.tsv')):
    for line in open(os.path.join(ldir, 'stages.tsv')):
        name, result, secs, cap = line.rstrip('\n').split('\t')
        total += int(secs)
        print(f'{name:<10} {result:<22} {secs:>7} {cap:>5}')
print(f"{'total':<10} {'':<22} {total:>7}")

# meson's console lines ("3/15 oclfuse:unit+gpu-defaults / norm-gpu-defaults OK 12.3s"):
# they count the tests that finished even when the stage was cut
tests, planned = {}, 0
p = os.path.join(ldir, 'test.log')
if os.path.exists(p):
    for line in open(p, errors='replace'):
        m = re.match(r'^\s*\d+/(\d+)\s+\S+ / (\S+)\s+(OK|FAIL|SKIP|TIMEOUT|ERROR|INTERRUPT|EXPECTEDFAIL|UNEXPECTEDPASS)\b', line)
        if m:
            planned = int(m.group(1))
            tests[m.group(2)] = m.group(3)
    if planned or os.path.getsize(p):
        bad = [f'{n} {r}' for n, r in tests.items() if r not in ('OK', 'SKIP', 'EXPECTEDFAIL', 'INTERRUPT')]
        cut = [n for n, r in tests.items() if r == 'INTERRUPT']
        skipped = sum(r == 'SKIP' for r in tests.values())
        print(f"\ntests: {sum(r == 'OK' for r in tests.values())} passed, {len(bad)} failed"
              + (f', {skipped} skipped' if skipped else '')
              + (f"; cut by the stage's time: {', '.join(cut)}" if cut else '')
              + (f'; {planned - len(tests)} of {planned} not run' if planned > len(tests) else '')
              + (': ' + ', '.join(bad) if bad else '')
              + ('' if planned else ' (none finished; see test.log)'))

def shape(s):
    return 'x'.join(str(v) for v in s.values())

for name, title in (('bench.json', 'bench'), ('bench-tuned.json', 'bench on the tuned records')):
    rows = load(name)
    if not rows:
        continue
    print(f'\n{title} ({len(rows)} rows; GB/s of the minimum bytes, % of the same-bytes copy):')
    by = {}
    for r in rows:
        by.setdefault((r['op'], r['dtype'], shape(r['shape'])), {})[r['path']] = r
    print(f"  {'op':<18} {'dtype':<5} {'shape':<26} {'fused':>14} {'unfused':>14} {'auto':>14} {'copy GB/s':>9}")
    for (op, dt, sh), paths in by.items():
        cells, copy = [], ''
        for p in ('fused', 'unfused', 'auto'):
            r = paths.get(p)
            if not r:
                cells.append('-')
                continue
            pct = r.get('of_copy_same_bytes')
            g = f"{r['gbps']:.0f}" if r['gbps'] >= 10 else f"{r['gbps']:.2g}"
            cells.append(f"{g} ({pct * 100:.0f}%)" if pct and pct > 0 else f"{r['time_ns'] / 1e6:.3f} ms")
            copy = f"{r.get('copy_same_bytes_gbps', 0):.0f}"
        print(f'  {op:<18} {dt:<5} {sh:<26} {cells[0]:>14} {cells[1]:>14} {cells[2]:>14} {copy:>9}')

for b in ('1', '16'):
    d = load(f'layer-b{b}.json')
    if not d:
        continue
    steps = d.get('steps', [])
    pre = [s for s in steps if s['kind'] == 'prefill']
    dec = [s for s in steps if s['kind'] == 'decode']
    line = f"\nlayer (batch {b}, {d['layers']} layers, hidden {d['hidden']}, {d['dtype']}): "
    if pre:
        line += f"prefill {pre[0]['tokens']} tokens {pre[0]['time_ms']:.2f} ms ({pre[0]['tokens_per_s']:.0f} tokens/s)"
    if dec:
        ms = sorted(s['time_ms'] for s in dec)[len(dec) // 2]
        frac = sorted(s['roofline_fraction'] for s in dec)[len(dec) // 2]
        line += f"; decode median {ms:.3f} ms a step, {frac * 100:.0f}% of the copy roofline"
    print(line)

p = os.path.join(ldir, 'matrix.txt')
if os.path.exists(p):
    print('\nmatrix units (oclfuse-mma-probe):')
    for line in open(p, errors='replace').read().splitlines()[:40]:
        print('  ' + line)

t = load('tuning.json')
if t:
    recs = t.get('records', [])
    print(f"\ntuning: {len(recs)} records ({sum(r['choice']['path'] == 'fused' for r in recs)} fused)")
p = os.path.join(ldir, 'binaries', 'index.txt')
if os.path.exists(p):
    lines = [l for l in open(p) if l.strip()]
    print(f"program binaries: {len(lines)} files in lease.tar.gz (binaries/)")
PY
}

# OUT brought up to date: the five files and the archive of everything.
lease_publish() {
  local f
  for f in probe.txt bench.json bench-tuned.json tuning.json; do
    [ -f "$ldir/$f" ] && cp "$ldir/$f" "$out/$f.tmp" && mv "$out/$f.tmp" "$out/$f"
  done
  lease_summary >"$ldir/summary.txt" 2>&1 || true
  cp "$ldir/summary.txt" "$out/summary.txt.tmp" && mv "$out/summary.txt.tmp" "$out/summary.txt"
  tar -czf "$out/lease.tar.gz.tmp" -C "$ldir" . && mv "$out/lease.tar.gz.tmp" "$out/lease.tar.gz"
}

# Runs stage $1 in a process of its own under its cap (signal $2, TERM by
# default), records its outcome and publishes.
lease_stage() {
  local name=$1 sig=${2:-TERM} cap left t0=$SECONDS rc=0 result
  cap=$(lease_cap "$name")
  left=$((lease_deadline - SECONDS - 3))
  if [ $left -lt 1 ]; then
    printf '%s\t%s\t%s\t%s\n' "$name" "skipped: out of time" 0 0 >>"$ldir/stages.tsv"
    lease_publish
    return 1
  fi
  [ "$cap" -gt $left ] && cap=$left
  say "stage $name (cap $cap s)"
  stage_cap=$cap timeout -s "$sig" -k 3 "$cap" bash "$self" _lease-stage "$name" >>"$ldir/stage-$name.log" 2>&1 || rc=$?
  case $rc in
    0) result=ok ;;
    124|137) result="cut at its cap" ;;
    *) result="failed (exit $rc)" ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$result" $((SECONDS - t0)) "$cap" >>"$ldir/stages.tsv"
  say "stage $name: $result after $((SECONDS - t0)) s"
  lease_publish
  return $rc
}

cmd_lease() {
  mkdir -p "$out"
  local n; n=$(find "$out" -mindepth 1 -maxdepth 1 | wc -l)
  [ "$n" = 0 ] || say "$out is not empty: the lease's files replace theirs"
  ldir="$dir/lease"
  rm -rf "$ldir" && mkdir -p "$ldir"
  date -u '+%Y-%m-%d %H:%M:%S UTC' >"$ldir/started"
  self="$src/tools/gpu-kit.sh"
  export dir out src prefix ccprefix build triplet isolate cc_choice orig_path orig_ld orig_python ldir self
  local s
  # unpacking first: the probe runs clinfo from the prefix; a failure ends
  # nothing before the probe has said what the machine has
  lease_stage unpack || true
  vendor_dirs=""
  write_icds || true
  export vendor_dirs
  lease_stage probe || true
  case "$(cat "$ldir/probe-status" 2>/dev/null)" in
    ok) ;;
    *) cat "$out/summary.txt" >&2; die "stopped after the probe (see $out/summary.txt)" ;;
  esac
  lease_stage build || { cat "$out/summary.txt" >&2; die "the build failed (build.log in $out/lease.tar.gz)"; }
  local failed=()
  for s in matrix test bench layer tune tuned binaries; do
    if [ "$s" = tune ]; then lease_stage "$s" INT || failed+=("$s")
    else lease_stage "$s" || failed+=("$s"); fi
  done
  cat "$out/summary.txt"
  [ ${#failed[@]} = 0 ] || die "stages not ok: ${failed[*]} (see $out/summary.txt)"
}

# A stage of the lease profile in its own process: the kit's environment
# made anew from the machine's, then the stage's function.
lease_child() {
  export PATH="$orig_path" LD_LIBRARY_PATH="$orig_ld"
  [ "$1" = unpack ] || kit_env
  "lease_$1"
}

cmd_run() {
  stages=all suites=unit,gpu-defaults tune_budget=120 tune_args="" bench_args=""
  stage_seconds=540 cc_choice=auto isolate=0
  local profile="" pos=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --profile) profile=$2; shift 2 ;;
      --stage) stages=$2; shift 2 ;;
      --suites) suites=$2; shift 2 ;;
      --tune-budget) tune_budget=$2; shift 2 ;;
      --tune-args) tune_args=$2; shift 2 ;;
      --bench-args) bench_args=$2; shift 2 ;;
      --stage-seconds) stage_seconds=$2; shift 2 ;;
      --cc) cc_choice=$2; shift 2 ;;
      --isolate) isolate=1; shift ;;
      -*) die "unknown option $1 (see $prog --help)" ;;
      *) pos+=("$1"); shift ;;
    esac
  done
  [ ${#pos[@]} = 2 ] || die "usage: $prog run [--profile lease] DIR OUT [options]"
  case "$profile" in ""|lease) ;; *) die "unknown profile $profile (lease is the one there is)" ;; esac
  case "$cc_choice" in auto|system|kit) ;; *) die "--cc takes auto, system or kit" ;; esac
  dir=$(abspath "${pos[0]}"); out=$(abspath "${pos[1]}")
  prefix="$dir/prefix" ccprefix="$dir/prefix/cc" build="$dir/build" triplet=x86_64-linux-gnu
  orig_path=$PATH orig_ld=${LD_LIBRARY_PATH:-} orig_python=$(command -v python3 || true)
  if [ "$profile" = lease ]; then
    cmd_lease
    return
  fi
  [ "$stages" = all ] && stages=unpack,build,info,test,tune,bench
  local st
  IFS=, read -r -a st <<<"$stages"
  for s in "${st[@]}"; do
    case "$s" in unpack|build|info|test|tune|bench) ;; *) die "unknown stage $s" ;; esac
  done
  # Every stage needs the prefix; unpacking is skipped when it is current.
  stage_unpack
  write_icds || die "no OpenCL driver found (no vendor library, nothing in /etc/OpenCL/vendors)"
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
  isolate=0 cc_choice=auto
  while :; do
    case "${1:-}" in
      --isolate) isolate=1; shift ;;
      --cc) cc_choice=$2; shift 2 ;;
      *) break ;;
    esac
  done
  [ $# -ge 3 ] && [ "$2" = -- ] || die "usage: $prog exec [--isolate] [--cc kit] DIR -- CMD [ARGS]"
  dir=$(abspath "$1"); shift 2
  prefix="$dir/prefix" ccprefix="$dir/prefix/cc" build="$dir/build" triplet=x86_64-linux-gnu
  [ -f "$prefix/.kit-packages" ] || die "$prefix is not unpacked: run '$prog run DIR OUT --stage unpack'"
  write_icds || die "no OpenCL driver found (no vendor library, nothing in /etc/OpenCL/vendors)"
  kit_env
  exec "$@"
}

# Merges a tuning database (a run's tuning.json) into DB through the
# library's own merge, so a record replaces the one of the same device, op,
# dtype and shape.
merge_records() {
  local from=$1 db=$2
  local lib="${OCLF_BUILD_DIR:-$src/build}/liboclfuse.so"
  [ -f "$lib" ] || die "$lib not found: build first (tools/build.sh)"
  python3 - "$lib" "$from" "$db" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.oclf_last_error.restype = ctypes.c_char_p
lib.oclf_last_error.argtypes = [ctypes.c_void_p]
n = ctypes.c_size_t()
if lib.oclf_tuning_db_check(sys.argv[2].encode(), ctypes.byref(n)) != 0:
    sys.exit('gpu-kit: ' + lib.oclf_last_error(None).decode())
text = open(sys.argv[2]).read()
if lib.oclf_tuning_db_merge(None, sys.argv[3].encode(), text.encode()) != 0:
    sys.exit('gpu-kit: ' + lib.oclf_last_error(None).decode())
lib.oclf_tuning_db_check(sys.argv[3].encode(), ctypes.byref(m := ctypes.c_size_t()))
print(f'gpu-kit: {n.value} records merged into {sys.argv[3]} ({m.value} records now)', file=sys.stderr)
PY
  rm -f "$db.lock"
}

# import FROM [DB] [--notes DIR] [--cpu BENCH_JSON]: FROM is a lease's OUT
# folder, its lease.tar.gz, or a tuning.json alone. The records go into DB
# (default tune/db/builtin.json, compiled into the library); from a lease,
# its bench JSON and a dated note (the summary, and each bench row beside
# the CPU's row of the same op, dtype and path from BENCH_JSON, by default
# build/bench.json of tools/run.sh) go into DIR (default docs/notes).
cmd_import() {
  local pos=() notes="$src/docs/notes" cpu="${OCLF_BUILD_DIR:-$src/build}/bench.json"
  while [ $# -gt 0 ]; do
    case "$1" in
      --notes) notes=$2; shift 2 ;;
      --cpu) cpu=$2; shift 2 ;;
      -*) die "unknown option $1" ;;
      *) pos+=("$1"); shift ;;
    esac
  done
  [ ${#pos[@]} -ge 1 ] && [ ${#pos[@]} -le 2 ] ||
    die "usage: $prog import OUT_DIR|lease.tar.gz|tuning.json [DB] [--notes DIR] [--cpu BENCH_JSON]"
  local from=${pos[0]} db=${pos[1]:-$src/tune/db/builtin.json}
  if [ -f "$from" ] && [[ "$from" != *.tar.gz ]]; then
    merge_records "$from" "$db"
    return
  fi
  local run
  run=$(mktemp -d)
  # shellcheck disable=SC2064 # the folder's name now
  trap "rm -rf '$run'" EXIT
  if [ -d "$from" ] && [ -f "$from/lease.tar.gz" ]; then
    tar -xzf "$from/lease.tar.gz" -C "$run"
  elif [ -d "$from" ]; then
    cp -r "$from"/. "$run"/
  elif [ -f "$from" ]; then
    tar -xzf "$from" -C "$run"
  else
    die "$from: no such file or folder"
  fi
  [ -f "$run/summary.txt" ] || die "$from holds no summary.txt: not a lease's OUT or archive"
  if [ -s "$run/tuning.json" ]; then
    merge_records "$run/tuning.json" "$db"
  else
    say "no tuning records in $from"
  fi
  mkdir -p "$notes"
  python3 - "$run" "$notes" "$cpu" <<'PY'
import json, os, re, shutil, sys
run, notes, cpu_path = sys.argv[1:4]

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

facts = {}
if os.path.exists(os.path.join(run, 'machine.txt')):
    for line in open(os.path.join(run, 'machine.txt')):
        k, _, v = line.rstrip('\n').partition('=')
        facts[k] = v
summary = open(os.path.join(run, 'summary.txt')).read()
# Without the archive (OUT's loose files alone) the summary's own lines
# give the machine and the date.
for k in ('cpu', 'gpu', 'cuda'):
    m = re.search(rf'^{k}: (.*)$', summary, re.M)
    if k not in facts and m:
        facts[k] = m.group(1)
started = open(os.path.join(run, 'started')).read().strip() if os.path.exists(os.path.join(run, 'started')) else ''
if not started:
    m = re.search(r'^run: (\d{4}-\d\d-\d\d [0-9:]+ UTC)', summary, re.M)
    started = m.group(1) if m else ''
date = started[:10] if re.match(r'\d{4}-\d\d-\d\d', started) else 'undated'
# The device: the GPU's name as nvidia-smi (or rocm-smi) gives it, else the
# OpenCL device of the tuning records.
gpu = facts.get('gpu', '').split(',')[0].strip()
if not gpu or gpu.startswith('none'):
    recs = (load(os.path.join(run, 'tuning.json')) or {}).get('records', [])
    gpu = recs[0]['device']['name'] if recs else 'unknown'
slug = re.sub(r'[^a-z0-9]+', '-', gpu.lower()).strip('-') or 'unknown'
base = os.path.join(notes, f'{date}-gpu-{slug}')
copied = []
for name, suffix in (('bench.json', '-bench.json'), ('bench-tuned.json', '-bench-tuned.json')):
    if os.path.exists(os.path.join(run, name)):
        shutil.copy(os.path.join(run, name), base + suffix)
        copied.append(os.path.basename(base + suffix))

def shape(s):
    return 'x'.join(str(v) for v in s.values())

def cell(r):
    if not r:
        return '-'
    pct = r.get('of_copy_same_bytes')
    if r.get('gbps') and pct and pct > 0:
        return f"{r['gbps']:.1f} ({pct * 100:.0f}%)"
    return f"{r['time_ns'] / 1e6:.3f} ms"

gpu_rows = load(os.path.join(run, 'bench.json')) or []
cpu_rows = load(cpu_path) or [] if cpu_path and os.path.exists(cpu_path) else []
# The CPU's row for a GPU row: the same op, dtype and path, at the same
# shape, else at the CPU's own out-of-cache shape where the GPU's row is
# past its cache too.
def cpu_for(r):
    same = [c for c in cpu_rows if (c['op'], c['dtype'], c['path']) == (r['op'], r['dtype'], r['path'])]
    for c in same:
        if c['shape'] == r['shape']:
            return c
    for c in same:
        if c.get('out_of_cache') and r.get('out_of_cache'):
            return c
    return None

out = [f"# {gpu}: the lease profile's figures ({date})", '']
out.append(f"Measured by `tools/gpu-kit.sh run --profile lease` on {started or 'an unrecorded date'}; "
           f"imported by `tools/gpu-kit.sh import`. Machine: {facts.get('cpu', 'unknown')}; "
           f"GPU: {facts.get('gpu', 'unknown')}; {facts.get('cuda', '')}.")
out.append('')
if copied:
    out.append('Bench JSON beside this note: ' + ', '.join(f'`{c}`' for c in copied) + '.')
    out.append('')
out.append('## Bench beside the CPU')
out.append('')
if not gpu_rows:
    out.append('No bench rows came back.')
else:
    if cpu_rows:
        out.append(f'GB/s of the minimum bytes, (% of the same-bytes copy of the same run); the CPU\'s '
                   f'figures from `{os.path.basename(cpu_path)}` ({len(cpu_rows)} rows), its row of the same '
                   'op, dtype and path at the same shape, or at its own out-of-cache shape.')
    else:
        out.append('GB/s of the minimum bytes, (% of the same-bytes copy of the same run). No CPU bench '
                   'JSON was given (`--cpu`, by default build/bench.json of tools/run.sh).')
    out.append('')
    out.append('| op | dtype | path | GPU shape | GPU | GPU copy GB/s | CPU shape | CPU | CPU copy GB/s |')
    out.append('| --- | --- | --- | --- | --- | --- | --- | --- | --- |')
    for r in gpu_rows:
        c = cpu_for(r)
        out.append(f"| {r['op']} | {r['dtype']} | {r['path']} | {shape(r['shape'])} | {cell(r)} | "
                   f"{r.get('copy_same_bytes_gbps', 0):.0f} | {shape(c['shape']) if c else '-'} | {cell(c)} | "
                   f"{c.get('copy_same_bytes_gbps', 0):.0f} |" if c else
                   f"| {r['op']} | {r['dtype']} | {r['path']} | {shape(r['shape'])} | {cell(r)} | "
                   f"{r.get('copy_same_bytes_gbps', 0):.0f} | - | - | - |")
out.append('')
out.append('## The run\'s summary')
out.append('')
out.append('```')
out.append(summary.rstrip())
out.append('```')
open(base + '.md', 'w').write('\n'.join(out) + '\n')
print(f'gpu-kit: {base}.md written ({len(gpu_rows)} bench rows)', file=sys.stderr)
PY
}

case "${1:-}" in
  fetch) shift; cmd_fetch "$@" ;;
  run) shift; cmd_run "$@" ;;
  exec) shift; cmd_exec "$@" ;;
  _lease-stage) shift; lease_child "$@" ;;
  caps) for s in "${lease_stages[@]}"; do echo "$s $(lease_cap "$s")"; done
        total=0; for s in "${lease_stages[@]}"; do total=$((total + $(lease_cap "$s"))); done
        echo "total $total"; echo "deadline $lease_deadline" ;;
  import) shift; cmd_import "$@" ;;
  -h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac
