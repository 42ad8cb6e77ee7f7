#!/usr/bin/env bash
# Installs what is missing (tools/setup.sh), configures and builds into
# $OCLF_BUILD_DIR (default build/). Used by run.sh and test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
builddir=${OCLF_BUILD_DIR:-build}
if [ -f "$builddir/build.ninja" ]; then
  meson setup --reconfigure "$builddir" >/dev/null
else
  meson setup "$builddir" >/dev/null
fi
ninja -C "$builddir"
