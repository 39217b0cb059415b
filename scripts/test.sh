#!/usr/bin/env bash
# The whole test suite: set up (scripts/setup.sh), make the reference KCoral's environment
# for the compatibility suite (scripts/reference-env.sh), then the C++ units (doctest,
# through CTest), a short run of each fuzz target (scripts/fuzz.sh), the Python package's
# static checks (ruff and mypy --strict, configured in pyproject.toml), and every Python
# test: units, end to end against the real server, the malformed-request corpus, the C++
# package check, and compatibility both ways with the reference client and server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
KCORAL_REFERENCE_VENV=$(scripts/reference-env.sh)
export KCORAL_REFERENCE_VENV
echo "test: C++ units (doctest)"
ctest --test-dir build/pip --output-on-failure
echo "test: fuzz targets (scripts/fuzz.sh)"
scripts/fuzz.sh
echo "test: Python static checks (ruff, mypy --strict)"
.venv/bin/python -m ruff check bindings
.venv/bin/python -m mypy
echo "test: Python (unit, end to end, corpus, package, compatibility)"
.venv/bin/python -m pytest test/python -q -p no:cacheprovider "$@"
