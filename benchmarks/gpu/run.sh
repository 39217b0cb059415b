#!/usr/bin/env bash
# The whole GPU check on the GPU machine (shared/device/GPU-MACHINE.md): unpack what was
# brought along, build, start a GPU server (fresh, sandboxed workers: the defaults), one
# with --sandbox none (for the sandbox's cost), one with reused workers and a CPU server,
# run the user guide's examples and the GPU tests (the sandbox's attacks among them),
# measure (benchmark() fidelity against raw CUPTI, throughput, lease handoff), and print
# the table; the table and logs go to $OUT.
#
#   benchmarks/gpu/run.sh stash      keep the carried part of the large wheels for a later call
#   benchmarks/gpu/run.sh build      that, then unpack, build, run the C++ units and try the sandbox
#   benchmarks/gpu/run.sh examples   the examples and the GPU tests, not the measurements
#   benchmarks/gpu/run.sh tests      the GPU tests only (the kcoral command's ncu and
#                                    compute-sanitizer among them): needs the debs, no wheels
#   benchmarks/gpu/run.sh limits     the per-program limits', tenants' and compile caches' tests
#                                    only, on CPU servers of this machine (its cgroup v2)
#   benchmarks/gpu/run.sh measure    the measurements only
#   benchmarks/gpu/run.sh small-kernel [N]   benchmark() against raw CUPTI for the 256-float
#                                    kernel, N processes a side, sandboxed and unsandboxed
#   benchmarks/gpu/run.sh real-jobs  the user guide's programs, 3 rounds each, on our GPU server
#                                    and the reference's (kcoral 0.1.1), both with their defaults,
#                                    and on ours without compile caches, and without those and
#                                    the preloads (benchmarks/gpu/real_jobs.py); needs
#                                    .gpu-carry/reference; REAL_JOBS_ARGS adds to its flags
#   benchmarks/gpu/run.sh contexts   fresh programs/s and a two-stream benchmark() on GPU servers
#                                    with one-queue workers (the default), CUDA's default queues,
#                                    one queue and nothing run again, and smaller launch queues
#                                    (benchmarks/gpu/fresh_contexts.py)
#   benchmarks/gpu/run.sh reuse      the same on GPU servers that reuse workers within a tenant,
#                                    checked between programs (the default) and not
#   benchmarks/gpu/run.sh windows    benchmark()'s call windows program after program, on reused,
#                                    trusted and fresh workers (benchmarks/gpu/timing_windows.py)
#   benchmarks/gpu/run.sh fidelity   what a change to benchmark() must pass, in one call: windows,
#                                    the C++ units, the GPU tests and the measurements (against
#                                    raw CUPTI), not the examples
#   benchmarks/gpu/run.sh wheel      the installed distributions, as users get them: the client
#                                    and the repaired server wheel for CPython 3.12
#                                    (.gpu-carry/wheel312, from scripts/server-wheel.sh) in a
#                                    fresh venv of this machine's python3.12, whose libpython
#                                    is linked into it; that server's GPU tests that need only
#                                    torch; needs .gpu-carry/wheels (ml_dtypes)
#   benchmarks/gpu/run.sh roundtrip  benchmarks/roundtrip.py on CPU servers of this machine (16 idle
#                                    cores): ours with fresh workers (forked side by side by the
#                                    default 4 copies of the worker parent, by it alone, by 2 and
#                                    by 8) and with reused workers beside the
#                                    reference's; needs .gpu-carry/reference and .gpu-carry/wheels;
#                                    ROUNDTRIP_ARGS adds to its flags
#   benchmarks/gpu/run.sh large-data 64 MiB up and back on CPU servers of this machine (16 cores):
#                                    where a round's time goes (benchmarks/large_data_phases.py),
#                                    an earlier tree's client and server beside this one's where
#                                    .gpu-carry/old-tree holds it, and roundtrip.py's large data
#                                    beside the reference's; needs .gpu-carry/reference and
#                                    .gpu-carry/wheels; PHASES_ARGS adds to the phases' flags,
#                                    PHASES_VARIANT measures this tree with those flags added too,
#                                    PHASES_ONLY=1 leaves roundtrip.py out
#   benchmarks/gpu/run.sh worker-cpu benchmarks/worker_cpu.py on CPU servers of this machine (16
#                                    cores): the CPU of a fresh worker, the front's and the worker
#                                    parent's shares, with torch and triton preloaded and without;
#                                    WORKER_CPU_ARGS adds to its flags
#   benchmarks/gpu/run.sh            everything (with what earlier calls stashed)
#
# Brought along (made by benchmarks/gpu/carry.sh, which says which call carries what):
# .gpu-carry/debs/*.deb (simdjson, CLI11, nlohmann-json, libseccomp), .gpu-carry/wheels/*.whl
# (TVM FFI, CuTeDSL, ml_dtypes), .gpu-carry/extra/*.whl (CuTeDSL's CUDA 13 libraries, put
# together from two calls' pieces), .gpu-carry/part.* (pieces of big.tar: the TVM wheel's
# contents as tvm.tar.xz), spread over calls; for real-jobs, .gpu-carry/reference (the
# reference's wheel, what its server needs beyond this machine's packages, and bubblewrap).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=/tmp/kcoral-logs      # many logs; $OUT gets the table, the figures and a tarball
result=${OUT:-/tmp/kcoral-out}
stash=/tmp/kcoral-carry
deps=/tmp/kcoral-deps
site=/tmp/kcoral-site
python=/opt/torch/.venv/bin/python3
mkdir -p "$out" "$result" "$stash"
cp .gpu-carry/part.* "$stash"/ 2>/dev/null
ls -la "$stash"
[[ ${1:-} == stash ]] && exit 0

log() { echo "== $*"; }
log "unpacking"
mkdir -p "$deps" "$site"
for deb in .gpu-carry/debs/*.deb; do dpkg -x "$deb" "$deps"; done
wheels=()
compgen -G ".gpu-carry/wheels/*.whl" >/dev/null && wheels+=(.gpu-carry/wheels/*.whl)
compgen -G ".gpu-carry/extra/*.whl" >/dev/null && wheels+=(.gpu-carry/extra/*.whl)
if [[ ${1:-} != build ]] && compgen -G "$stash/part.*" >/dev/null; then
  cat "$stash"/part.* > /tmp/big.tar && tar -C /tmp -xf /tmp/big.tar && rm /tmp/big.tar
  compgen -G "/tmp/big/*.whl" >/dev/null && wheels+=(/tmp/big/*.whl)
fi
# One pip call for all: with --target, a second call skips (or, with --upgrade, replaces)
# a top-level directory an earlier one made, and the CuTeDSL wheels share theirs.
rm -rf "$site" && mkdir -p "$site"
((${#wheels[@]})) && "$python" -m pip install -q --no-index --no-deps --no-compile --target "$site" "${wheels[@]}"
[[ -f /tmp/big/tvm.tar.xz ]] && tar -C "$site" -xJf /tmp/big/tvm.tar.xz
# $site is a site directory: its .pth files (CuTeDSL puts its packages on sys.path with
# one) run only when site.addsitedir reads them, here through a sitecustomize.
mkdir -p /tmp/kcoral-sitecustomize
echo "import site; site.addsitedir('$site')" >/tmp/kcoral-sitecustomize/sitecustomize.py
export PYTHONPATH=/tmp/kcoral-sitecustomize:$root/bindings
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
if [[ ${1:-} == real-jobs ]]; then
  # The reference (kcoral 0.1.1) goes apart from ours, whose kcoral package it would shadow.
  # Its GPU server starts now, so that its workers get ready while ours is built.
  refwheels=.gpu-carry/reference
  [[ -d $refwheels ]] || refwheels=$stash/reference   # stashed by an earlier call
  refsite=/tmp/kcoral-ref-site refdeps=/tmp/kcoral-ref-deps refcustom=/tmp/kcoral-ref-sitecustomize
  rm -rf "$refsite" && mkdir -p "$refsite" "$refdeps" "$refcustom" /tmp/kcoral-ref-run
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$refsite" "$refwheels"/*.whl || exit 1
  for deb in "$refwheels"/*.deb; do dpkg -x "$deb" "$refdeps"; done   # bubblewrap
  echo "import site; site.addsitedir('$refsite'); site.addsitedir('$site')" >"$refcustom/sitecustomize.py"
  refport=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  reference=http://127.0.0.1:$refport
  start_reference() {  # sandbox: bubblewrap (its default) or none
    local flags=(--sandbox "$1")
    # Its sandboxed workers see its own package; our unpacked wheels are shown to them too.
    [[ $1 == bubblewrap ]] && flags+=(--sandbox-readonly-path "$refcustom" --sandbox-readonly-path "$site")
    # And the machine's compiler, which Triton's launcher is built with (its own sandbox
    # leaves /opt out, and Triton then fails in it: no /opt/gcc/bin/gcc).
    [[ $1 == bubblewrap && -d /opt/gcc ]] && flags+=(--sandbox-readonly-path /opt/gcc)
    (cd /tmp/kcoral-ref-run && PATH=$refdeps/usr/bin:$PATH PYTHONPATH=$refsite:$refcustom \
      exec "$python" -m kcoral server --device gpu --gpus 0 --port "$refport" --log-dir "$out/reference-events" \
      "${flags[@]}") >>"$out/server-reference.log" 2>&1 &
    refpid=$! refsandbox=$1
  }
  start_reference bubblewrap
fi

if [[ ${1:-} == wheel ]]; then
  # Nothing of the checkout's build or package: the venv has the wheels alone, and torch,
  # pytest and httpx from this machine's torch environment (a .pth names its folder).
  log "the installed distributions: client and repaired server wheel in a fresh venv"
  venv=/tmp/kcoral-wheel-venv
  rm -rf "$venv" && /usr/bin/python3.12 -m venv "$venv" || exit 1
  "$venv/bin/python" -c 'import sysconfig; print("interpreter:", sysconfig.get_config_var("Py_ENABLE_SHARED") and "shared libpython" or "libpython linked in")'
  ls /opt/torch/.venv/lib/python3.12/site-packages >/dev/null && echo /opt/torch/.venv/lib/python3.12/site-packages \
    >"$($venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/torch-environment.pth"
  "$venv/bin/python" -m pip install -q --no-index --no-deps .gpu-carry/wheel312/*.whl .gpu-carry/wheels/ml_dtypes-*.whl || exit 1
  "$venv/bin/python" -m pip list 2>/dev/null | grep -i kcoral
  ldd "$venv/bin/python3.12" | grep -i libpython || echo "python3.12 links no libpython"
  (unset PYTHONPATH LD_LIBRARY_PATH
   cd /tmp && "$venv/bin/kcoral-server" --port 0 --device gpu --work-root /tmp/kcoral-work-wheel >"$out/server-wheel.log" 2>&1) &
  wheelpid=$!
  for _ in $(seq 1 900); do grep -qE "listening on|did not start" "$out/server-wheel.log" && break; sleep 0.1; done
  head -5 "$out/server-wheel.log"
  url=$(grep -o "http://[0-9.]*:[0-9]*" "$out/server-wheel.log" | head -n 1)
  [[ -n $url ]] || { tail -20 "$out/server-wheel.log"; exit 1; }
  (unset PYTHONPATH LD_LIBRARY_PATH
   cd /tmp && KCORAL_GPU_URL=$url timeout 300 "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider \
     "$root/test/python/gpu/test_gpu.py" -k "tensor or benchmark or cpu_only" \
     -c /dev/null --noconftest --rootdir "$root/test/python/gpu" 2>&1 | tail -6) | tee "$result/wheel.md"
  # As the tests above ran it: without this script's PYTHONPATH, which names the checkout's.
  (cd /tmp && env -u PYTHONPATH -u LD_LIBRARY_PATH "$venv/bin/python" -c "import kcoral
print('client from', kcoral.__file__, '(the wheel)' if kcoral.__file__.startswith('$venv/') else '(NOT the wheel)')") |
    tee -a "$result/wheel.md"
  kill -TERM "$wheelpid" 2>/dev/null
  sleep 2
  exit 0
fi

log "building"
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$python \
  -DCMAKE_PREFIX_PATH=$deps/usr -DKCORAL_BUILD_TESTS=ON -DKCORAL_BUILD_EXAMPLES=OFF >"$out/cmake.log" 2>&1 ||
  { tail -30 "$out/cmake.log"; exit 1; }
ninja -C build/gpu -j16 >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
nvcc -O3 -std=c++17 -arch=sm_90a benchmarks/gpu/raw_cupti.cu -o build/gpu/raw_cupti \
  -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -L/usr/local/cuda-13.0/targets/x86_64-linux/lib -lcupti \
  -Xlinker -rpath -Xlinker /usr/local/cuda-13.0/targets/x86_64-linux/lib || exit 1
# The package whole, as pip install lays it out: a tool's own Python (kcoral run python)
# imports kcoral._native from it, while workers have it built in.
cp build/gpu/bindings/_native*.so bindings/kcoral/
# The reference (kcoral 0.1.1) in a venv of its wheels, on this machine's torch environment.
reference_venv() {
  refvenv=/tmp/kcoral-ref-venv
  rm -rf "$refvenv" && /usr/bin/python3.12 -m venv "$refvenv" || exit 1
  echo /opt/torch/.venv/lib/python3.12/site-packages \
    >"$("$refvenv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/torch-environment.pth"
  local refwheels=.gpu-carry/reference
  [[ -d $refwheels ]] || refwheels=$stash/reference
  "$refvenv/bin/python" -m pip install -q --no-index --no-deps "$refwheels"/*.whl \
    .gpu-carry/wheels/ml_dtypes-*.whl .gpu-carry/wheels/protobuf-*.whl || exit 1
}
if [[ ${1:-} == roundtrip ]]; then
  # The CPU goals that need idle cores (fresh workers' throughput and queue, 64 MiB up and
  # back), on this machine's 16 cores: benchmarks/roundtrip.py with our CPU server, the same
  # reusing workers, the same preloading neither torch nor triton (a smaller worker parent
  # to fork from), and the reference's (kcoral 0.1.1 in a venv of its wheels, on this
  # machine's torch environment), 8 workers each.
  log "round trip on CPU servers of this machine's 16 cores, beside the reference's"
  reference_venv
  server=$root/build/gpu/kcoral-server/kcoral-server
  timeout 560 "$python" benchmarks/roundtrip.py --server "$server" --reference-venv "$refvenv" \
    --workers 8 ${ROUNDTRIP_ARGS:-} --variant "one-fork-parent=$server --fork-parents 1" \
    --variant "two-fork-parents=$server --fork-parents 2" --variant "eight-fork-parents=$server --fork-parents 8" \
    --variant "reused=$server --programs-per-worker 64" \
    --variant "numpy-only=$server --preload numpy,kcoral.builtins,kcoral._native" \
    --json "$result/roundtrip.json" 2>&1 | tee "$result/roundtrip.md"
  exit 0
fi
if [[ ${1:-} == large-data ]]; then
  # 64 MiB up and back on this machine's 16 cores: where a round's time goes, our client
  # against our CPU server (benchmarks/large_data_phases.py), and where .gpu-carry/old-tree
  # holds an earlier tree (git archive REV | tar -x -C .gpu-carry/old-tree), that tree's
  # client and server in the same run, alternating; then roundtrip.py's large data, our
  # client and server beside the reference's (kcoral 0.1.1), each with either client.
  log "large data on CPU servers of this machine's 16 cores"
  server=$root/build/gpu/kcoral-server/kcoral-server
  phases() {  # label, client's directory, server
    echo "-- $1"
    PYTHONPATH=/tmp/kcoral-sitecustomize:$2 timeout 200 "$python" benchmarks/large_data_phases.py \
      --server "$3" --workers 8 --rounds 7 ${PHASES_ARGS:-} 2>&1 | tee -a "$result/phases-$1.md"
  }
  if [[ -d .gpu-carry/old-tree ]]; then
    cmake -S .gpu-carry/old-tree -B build/old -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$python \
      -DCMAKE_PREFIX_PATH=$deps/usr >"$out/cmake-old.log" 2>&1 && ninja -C build/old -j16 kcoral-server kcoral-init \
      kcoral_native >"$out/build-old.log" 2>&1 || { tail -20 "$out/build-old.log"; exit 1; }
    # Its workers run in its own native module, which speaks its front's channel.
    cp build/old/bindings/_native*.so .gpu-carry/old-tree/bindings/kcoral/
  fi
  for pass in 1 2; do
    [[ -d .gpu-carry/old-tree ]] &&
      phases before "$root/.gpu-carry/old-tree/bindings" "$root/build/old/kcoral-server/kcoral-server"
    phases after "$root/bindings" "$server"
    [[ -n ${PHASES_VARIANT:-} ]] && PHASES_ARGS="${PHASES_ARGS:-} $PHASES_VARIANT" phases variant "$root/bindings" "$server"
  done
  [[ ${PHASES_ONLY:-} == 1 ]] && exit 0
  reference_venv
  timeout 300 "$python" benchmarks/roundtrip.py --server "$server" --reference-venv "$refvenv" --workers 8 \
    --requests 20 --reference-requests 2 --duration 2 --large-rounds 7 \
    --json "$result/roundtrip-large.json" 2>&1 | tee "$result/roundtrip-large.md"
  exit 0
fi
if [[ ${1:-} == worker-cpu ]]; then
  # A fresh worker's CPU, and the worker parent's share of it, with the parent this
  # machine's environment makes (torch and triton preloaded) and a small one, on 16 cores.
  log "benchmarks/worker_cpu.py on CPU servers of this machine's 16 cores"
  server=$root/build/gpu/kcoral-server/kcoral-server
  timeout 560 "$python" benchmarks/worker_cpu.py --server "$server" --workers 8 --clients 8 \
    --warmup 300 --programs 2000 ${WORKER_CPU_ARGS:-} \
    --variant "one-fork-parent=--fork-parents 1" --variant "two-fork-parents=--fork-parents 2" \
    --variant "eight-fork-parents=--fork-parents 8" \
    --variant "numpy-only=--preload numpy,kcoral.builtins,kcoral._native" \
    --variant "reused=--programs-per-worker 1000" 2>&1 | tee "$result/worker-cpu.md"
  exit 0
fi
if [[ ${1:-} == real-jobs ]]; then
  log "real jobs: our GPU server and the reference's, each with its defaults; ours as it was too"
  # ours: the defaults. no-cache: without the tenant's compile cache. before: that, and
  # the worker parent preloading only numpy and torch, as before the real jobs' work.
  ourpids=()
  start_ours() {  # name, flags...
    local name=$1; shift
    build/gpu/kcoral-server/kcoral-server --port 0 --python $python --work-root /tmp/kcoral-work-$name \
      --program-env "PYTHONPATH=$PYTHONPATH" --device gpu "$@" >"$out/server-$name.log" 2>&1 &
    ourpids+=($!)
  }
  start_ours ours
  start_ours no-cache --compile-cache-bytes 0
  start_ours before --compile-cache-bytes 0 --preload numpy,torch
  url_of() {
    for _ in $(seq 1 900); do grep -qE "listening on|did not start" "$out/server-$1.log" && break; sleep 0.1; done
    grep -o "http://[0-9.]*:[0-9]*" "$out/server-$1.log" | head -n 1
  }
  ours=$(url_of ours) nocache=$(url_of no-cache) before=$(url_of before)
  [[ -n $ours ]] || tail -20 "$out/server-ours.log"
  grep -h "compile caches\|preloaded" "$out/server-ours.log"
  ready() { "$python" -c "import sys, httpx; sys.exit(httpx.get(sys.argv[1] + '/health').status_code != 200)" "$1" 2>/dev/null; }
  for _ in $(seq 1 200); do  # its workers import torch, TVM and CuTeDSL and make their contexts first
    ready "$reference" && break
    if ! kill -0 "$refpid" 2>/dev/null; then
      [[ $refsandbox == bubblewrap ]] || break
      echo "the reference's server did not start with bubblewrap; again with --sandbox none:"
      tail -5 "$out/server-reference.log"
      start_reference none
    fi
    sleep 0.5
  done
  ready "$reference" || { echo "the reference's server is not ready:"; tail -30 "$out/server-reference.log"; reference=; }
  {
    echo "# Real jobs, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/GPU: /'
    echo "ours: $(grep -h "listening on" "$out/server-ours.log")"
    echo "reference: kcoral 0.1.1, --sandbox $refsandbox, $reference"
    echo
  } >"$result/real-jobs.md"
  real_args=()
  [[ -n $ours ]] && real_args+=(--ours "$ours")
  [[ -n $nocache ]] && real_args+=(--variant "no-cache=$nocache")
  [[ -n $before ]] && real_args+=(--variant "before=$before")
  [[ -n $reference ]] && real_args+=(--reference "$reference")
  PYTHONUNBUFFERED=1 timeout ${REAL_JOBS_TIMEOUT:-480} "$python" benchmarks/gpu/real_jobs.py "${real_args[@]}" \
    --json "$result/real-jobs.json" ${REAL_JOBS_ARGS:-} 2>&1 | tee -a "$result/real-jobs.md"
  kill -TERM "${ourpids[@]}" "$refpid" 2>/dev/null
  sleep 3
  tar -C /tmp -czf "$result/logs.tar.gz" kcoral-logs
  exit 0
fi
if [[ ${1:-} == windows || ${1:-} == fidelity ]]; then
  log "benchmark() call windows: ten programs in a row on reused, trusted and fresh workers"
  for setting in "reused --programs-per-worker 100" "trusted --programs-per-worker 100 --reuse-check none" "fresh"; do
    read -r name flags <<<"$setting"
    # shellcheck disable=SC2086  # the flags are words
    build/gpu/kcoral-server/kcoral-server --port 0 --python $python --work-root /tmp/kcoral-work-$name \
      --program-env "PYTHONPATH=$PYTHONPATH" --device gpu --gpus 0 --workers-per-gpu 1 $flags \
      >"$out/server-$name.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 900); do grep -qE "listening on|did not start" "$out/server-$name.log" && break; sleep 0.1; done
    url=$(grep -o "http://[0-9.]*:[0-9]*" "$out/server-$name.log" | head -n 1)
    timeout 120 "$python" benchmarks/gpu/timing_windows.py "$url" "$name" 2>&1 | tee -a "$result/windows.md"
    kill -TERM "$pid" 2>/dev/null
    sleep 1
  done
  [[ ${1} == windows ]] && exit 0
fi
if [[ ${1:-} == contexts || ${1:-} == reuse ]]; then
  # contexts: fresh workers with CUDA's defaults and with cheaper fresh contexts; reuse:
  # workers reused within a tenant, checked between programs and not.
  log "${1}: programs/s and a two-stream benchmark() per setting"
  if [[ ${1} == contexts ]]; then
    settings=("default" "eight --cuda-connections 0" "connections1 --cuda-connections 1"
              "default-launch-quarter --program-env CUDA_SCALE_LAUNCH_QUEUES=0.25x")
  else
    settings=("reused-checked --programs-per-worker 1000" "reused-trusted --programs-per-worker 1000 --reuse-check none")
  fi
  # CONTEXTS_SETTINGS="name flags...;name flags...": other servers instead, in either mode
  [[ -n ${CONTEXTS_SETTINGS:-} ]] && IFS=';' read -r -a settings <<<"$CONTEXTS_SETTINGS"
  ctxpids=() servers=()
  for setting in "${settings[@]}"; do
    read -r name flags <<<"$setting"
    # shellcheck disable=SC2086  # the flags are words
    build/gpu/kcoral-server/kcoral-server --port 0 --python $python --work-root /tmp/kcoral-work-$name \
      --program-env "PYTHONPATH=$PYTHONPATH" --device gpu --gpus 0 --log-dir "$out/events-$name" $flags \
      >"$out/server-$name.log" 2>&1 &
    ctxpids+=($!)
  done
  for setting in "${settings[@]}"; do
    read -r name _ <<<"$setting"
    for _ in $(seq 1 900); do grep -qE "listening on|did not start" "$out/server-$name.log" && break; sleep 0.1; done
    url=$(grep -o "http://[0-9.]*:[0-9]*" "$out/server-$name.log" | head -n 1)
    [[ -n $url ]] && servers+=(--server "$name=$url") || tail -5 "$out/server-$name.log"
  done
  # Reused workers answer faster than one client process's threads can send: 4 processes.
  clients=(--processes 1)
  [[ ${1} == reuse ]] && clients=(--processes 4)
  timeout ${CONTEXTS_TIMEOUT:-300} "$python" benchmarks/gpu/fresh_contexts.py "${servers[@]}" "${clients[@]}" \
    --json "$result/$1.json" 2>&1 | tee "$result/$1.md"
  for server in "${servers[@]}"; do
    [[ $server == --server ]] || "$python" -c "import sys, httpx; print(sys.argv[1].split('=')[0], [l for l in httpx.get(sys.argv[1].split('=', 1)[1] + '/metrics').text.splitlines() if l.startswith('kcoral_workers_retired_total') and not l.endswith(' 0')])" "$server"
  done | tee -a "$result/$1.md"
  if [[ ${1} == reuse ]]; then  # the GPU tests that need no more than torch, on reused workers
    KCORAL_GPU_URL=${servers[1]#*=} timeout 300 "$python" -m pytest -q -p no:cacheprovider test/python/gpu/test_gpu.py \
      -k "tensor or benchmark or cpu_only" 2>&1 | tail -5 | tee -a "$result/$1.md"
    # and a server of the test's own: benchmark() programs keep sharing a checked worker
    KCORAL_GPU_URL=${servers[1]#*=} KCORAL_SERVER=$root/build/gpu/kcoral-server/kcoral-server timeout 300 \
      "$python" -m pytest -q -p no:cacheprovider test/python/gpu/test_gpu_reuse.py 2>&1 | tail -40 | tee -a "$result/$1.md"
  fi
  echo "why workers were retired:" | tee -a "$result/$1.md"
  cat "$out"/events-*/events.jsonl 2>/dev/null | grep -o '"worker_retired":"[^"]*"' | sort | uniq -c | sort -rn | head |
    tee -a "$result/$1.md"
  kill -TERM "${ctxpids[@]}" 2>/dev/null
  sleep 2
  exit 0
fi
log "C++ units"
KCORAL_PYTHON=$python ctest --test-dir build/gpu --output-on-failure 2>&1 | tail -30
if [[ ${1:-} == build ]]; then
  log "can this machine make the sandbox? (a CPU server's start says)"
  build/gpu/kcoral-server/kcoral-server --port 0 --python $python --work-root /tmp/kcoral-work-probe \
    --device cpu --num-workers 1 >"$out/server-probe.log" 2>&1 &
  probe=$!
  for _ in $(seq 1 300); do grep -qE "listening on|did not start" "$out/server-probe.log" && break; sleep 0.1; done
  kill -TERM $probe 2>/dev/null; wait $probe 2>/dev/null
  cat "$out/server-probe.log"
  exit 0
fi

server=build/gpu/kcoral-server/kcoral-server
start() {  # name, flags...: starts a server, prints its URL
  local name=$1; shift
  # Programs get a fixed environment: the kcoral package (on PYTHONPATH here, not installed)
  # reaches the tools they start (kcoral run python, ncu) through --program-env.
  $server --port 0 --python $python --work-root /tmp/kcoral-work-$name --program-env "PYTHONPATH=$PYTHONPATH" "$@" \
    >"$out/server-$name.log" 2>&1 &
  echo $! >>/tmp/kcoral-servers
  for _ in $(seq 1 600); do
    grep -q "listening on" "$out/server-$name.log" && break
    sleep 0.1
  done
  grep -o "http://[0-9.]*:[0-9]*" "$out/server-$name.log" | head -n 1
}
rm -f /tmp/kcoral-servers
# A secret in the GPU server's environment: test_gpu_sandbox checks that no program sees it.
gpu=$(KCORAL_CHECK_SECRET=do-not-show start gpu --device gpu --gpus 0 --workers-per-gpu 2)
unsandboxed=$(start unsandboxed --device gpu --gpus 0 --workers-per-gpu 2 --sandbox none)
reused=$(start reused --device gpu --gpus 0 --workers-per-gpu 2 --programs-per-worker 64)
cpu=$(start cpu --device cpu --num-workers 4)
log "servers: gpu=$gpu unsandboxed=$unsandboxed reused=$reused cpu=$cpu"
grep -h "sandbox\|limits:" "$out/server-gpu.log" | head -4
[[ -n $gpu && -n $cpu ]] || { tail -20 "$out"/server-*.log; exit 1; }

summary=$result/gpu-check.md  # straight into $OUT: it comes back even if the call is cut short
{
  echo "# GPU check, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/GPU: /'
  echo
  "$python" -c "import sys; from kcoral import Client; print('/health:', Client(sys.argv[1]).health())" "$gpu"
  echo
  echo "| example | status | kernel times |"
  echo "| --- | --- | --- |"
} >"$summary"
example() {  # name, script, env...
  local name=$1 script=$2; shift 2
  # An example reports a failed program and goes on, so its exit code alone is not enough.
  if env "$@" timeout 600 "$python" "$script" >"$out/example-$name.log" 2>&1 &&
     ! grep -qE ": FAILED|Traceback" "$out/example-$name.log"; then status=passed; else status=FAILED; fi
  times=$(grep -oE "^[A-Za-z ]+:|kernel [0-9.]+ us|'latency_ms_median': [0-9.e-]+" "$out/example-$name.log" | tr '\n' ' ')
  echo "| $name | $status | $times |" >>"$summary"
  log "example $name: $status"
  [[ $status == passed ]] || tail -15 "$out/example-$name.log"
}
if [[ ${1:-} != measure && ${1:-} != small-kernel && ${1:-} != tests && ${1:-} != limits && ${1:-} != fidelity ]]; then
example benchmark_kernel examples/benchmark_kernel.py KCORAL_URL=$gpu
example remote_compile_client examples/remote_compile_client.py KCORAL_URL=$gpu
example library_upload_client examples/library_upload_client.py KCORAL_URL=$gpu
example cpu_build_gpu_run_client examples/cpu_build_gpu_run_client.py KCORAL_URL=$gpu KCORAL_CPU_URL=$cpu
fi

if [[ ${1:-} != measure && ${1:-} != small-kernel && ${1:-} != limits ]]; then
log "GPU tests"
KCORAL_GPU_URL=$gpu KCORAL_SERVER=$server timeout 900 "$python" -m pytest -q -rs -p no:cacheprovider test/python/gpu 2>&1 | tee "$out/gpu-tests.log" | tail -15
echo >>"$summary"
echo "GPU tests: $(tail -n 1 "$out/gpu-tests.log")" >>"$summary"
echo "GPU server's limits: $(grep -h "limits:" "$out/server-gpu.log" | head -1)" >>"$summary"
fi
if [[ ${1:-} == tests || ${1:-} == limits ]]; then
log "per-program limits and tenants, CPU servers of this machine's own (cgroup v2)"
KCORAL_SERVER=$server timeout 500 "$python" -m pytest -q -rs -p no:cacheprovider \
  test/python/adversarial/test_program_limits.py test/python/adversarial/test_program_view.py \
  test/python/adversarial/test_worker_starts.py test/python/adversarial/test_tenants.py \
  test/python/adversarial/test_fork_parents.py test/python/e2e/test_e2e_compile_cache.py 2>&1 |
  tee "$out/limits-tests.log" | tail -15
echo "Per-program limits and tenants (CPU servers): $(tail -n 1 "$out/limits-tests.log")" >>"$summary"
find /tmp/pytest-of-root -name server.stderr -size +0 2>/dev/null | tail -40 | tar -czf "$result/test-servers.tar.gz" -T - 2>/dev/null
fi

if [[ ${1:-} == small-kernel ]]; then
  log "the 256-float kernel in ${2:-15} processes a side, sandboxed and not"
  timeout 500 "$python" benchmarks/gpu/gpu_checks.py --fresh "$gpu" --reused "$reused" \
    --fresh-variant "sandbox none=$unsandboxed" --small-kernel-processes "${2:-15}" \
    --raw-cupti build/gpu/raw_cupti --json "$result/gpu-small-kernel.json" 2>&1 | tee -a "$summary"
elif [[ ${1:-} != examples && ${1:-} != tests && ${1:-} != limits ]]; then
log "measurements"
echo >>"$summary"
timeout 900 "$python" benchmarks/gpu/gpu_checks.py --fresh "$gpu" --reused "$reused" \
  --fresh-variant "sandbox none=$unsandboxed" \
  --raw-cupti build/gpu/raw_cupti --json "$result/gpu-figures.json" 2>&1 | tee -a "$summary"
fi
xargs kill -TERM </tmp/kcoral-servers 2>/dev/null
sleep 2
tar -C /tmp -czf "$result/logs.tar.gz" kcoral-logs
echo
cat "$summary"
