#!/usr/bin/env bash
# Installs the Debian packages liboclfuse needs to build, test and run, when
# they are missing. Safe to run again: installs nothing when all are present.
set -euo pipefail

packages=(
  gcc pkg-config python3 meson ninja-build
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
  libclblast-dev libjansson-dev check libsubunit-dev
  oclgrind liboclgrind-dev g++ valgrind clang libclang-rt-dev
  clang-15 libclc-15
  # gfx942 (MI300) in the GPU report: clang-19's AMDGPU back end. libclc-19
  # conflicts with libclc-15, so tests/gpu_compile.py unpacks it itself.
  clang-19
  openmpi-bin libopenmpi-dev
  python3-pyopencl python3-numpy python3-pytest python3-matplotlib
  # pip install . (docs/python.md; the pip test suite)
  python3-mesonpy python3-venv
  # What Mesa's OpenCL library needs to load: the rusticl suite unpacks
  # mesa-opencl-icd itself (apt-get download) so that it never becomes a
  # system OpenCL device; these are plain libraries and register none.
  libllvmspirvlib15 libclang-cpp15 libllvm15 libdrm2 libdrm-amdgpu1
  libdrm-nouveau2 libdrm-radeon1 libelf1 libexpat1 libsensors5 libzstd1 zlib1g
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
