#!/usr/bin/env bash
# The test suite's fuzz step (fuzz/README.md): installs Debian's clang 19 and its libFuzzer
# runtime when missing, builds the fuzz targets in build/fuzz, then runs each for
# KCORAL_FUZZ_SECONDS (default 20) over seeds made from the test suite, as many at once as
# there are cores. A crash, leak, sanitizer report or broken invariant fails it; the input
# is kept in build/fuzz/fuzz/artifacts/<target>/. `--build-only` stops after the build.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian 12's default clang (14) cannot compile <expected> from libstdc++ 12; clang 19 can.
source scripts/apt-packages.sh
install_packages fuzz --no-install-recommends -- clang-19 libclang-rt-19-dev

python=$PWD/.venv/bin/python
[[ -x $python ]] || python=$(command -v python3)
cmake -S . -B build/fuzz -G Ninja -DKCORAL_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-19 \
  -DPython_EXECUTABLE="$python" -DKCORAL_FUZZ_SECONDS="${KCORAL_FUZZ_SECONDS:-20}" >/dev/null
echo "fuzz: building build/fuzz"
cmake --build build/fuzz
[[ ${1:-} == --build-only ]] && exit 0
ctest --test-dir build/fuzz --output-on-failure -j "$(nproc)"
