#!/usr/bin/env bash
# The main job: set everything up, start a local kcoral-server (GPU mode when this machine
# has an NVIDIA GPU, CPU mode otherwise), run the matching example against it and print
# its report, then stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  device=gpu example=examples/benchmark_kernel.py
else
  device=cpu example=examples/cpu_compile_client.py
fi

log=$(mktemp)
.venv/bin/kcoral-server --device "$device" --port 0 >"$log" 2>&1 &
server=$!
trap 'kill -TERM "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 1200); do
  grep -q "listening on" "$log" && break
  if ! kill -0 "$server" 2>/dev/null; then cat "$log" >&2; exit 1; fi
  sleep 0.1
done
url=$(grep -o "http://[0-9.]*:[0-9]*" "$log" | head -n 1)
echo "demo: kcoral-server ($device mode) at $url; running $example"
KCORAL_URL="$url" .venv/bin/python "$example"
