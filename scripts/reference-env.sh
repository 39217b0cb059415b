#!/usr/bin/env bash
# Makes the virtual environment of the reference implementation, PyPI kcoral[server]==0.1.1
# (its FastAPI server `kcoral server --device cpu` and its client), that the compatibility
# suite (test/python/compat) and the overhead benchmark (benchmarks/roundtrip.py) run
# against. The venv is $KCORAL_REFERENCE_VENV, by default .cache/reference-venv in this
# checkout (git-ignored). Safe to run again: an environment that already holds the pinned
# version is left as it is; a half-finished one is completed. The install pulls torch and
# the CUDA wheels the server extra names: about 7 GB and several minutes.
#
# Progress goes to stderr; the venv's absolute path is the one line on stdout:
#   venv=$(scripts/reference-env.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.1.1
venv=${KCORAL_REFERENCE_VENV:-.cache/reference-venv}
python=${KCORAL_REFERENCE_PYTHON:-python3}
say() { echo "reference-env: $*" >&2; }

installed() {
  [[ -x "$venv/bin/kcoral" ]] && "$venv/bin/python" - "$version" 2>/dev/null <<'EOF'
import importlib.metadata, sys
import fastapi, uvicorn  # the server extra
sys.exit(importlib.metadata.version("kcoral") != sys.argv[1])
EOF
}

if installed; then
  say "kcoral[server]==$version already in $venv"
else
  if ! "$venv/bin/python" -c "" 2>/dev/null; then
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
      say "$python is older than 3.10, which kcoral $version needs (set KCORAL_REFERENCE_PYTHON)"
      exit 1
    }
    say "creating $venv with $("$python" --version 2>&1)"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv --clear "$venv"
  fi
  say "installing kcoral[server]==$version into $venv (about 7 GB, several minutes)"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q "kcoral[server]==$version"
  installed || { say "the install finished but kcoral $version is not importable"; exit 1; }
  say "done"
fi
(cd "$venv" && pwd)
