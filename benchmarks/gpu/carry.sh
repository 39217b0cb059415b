#!/usr/bin/env bash
# Prepares what the GPU check brings to the GPU machine (shared/device/GPU-MACHINE.md), in
# .gpu-carry/ (git-ignored): the Debian packages the build needs there (debs/), the Python
# wheels its examples need (wheels/), and two wheels too big for one call: TVM's, as
# big.tar = big/tvm.tar.xz split into part.aa and part.ab, and CuTeDSL's CUDA 13 libraries,
# split into cu13/part.aa and cu13/part.ab. Safe to run again. One call at a time, each
# within the machine's warm time of the one before (what is stashed lives in its /tmp):
#
#   1. carry .gpu-carry/part.aa, .gpu-carry/debs:  benchmarks/gpu/run.sh build
#   2. carry .gpu-carry/part.ab:  benchmarks/gpu/run.sh stash
#   3. carry .gpu-carry/cu13/part.aa:  mkdir -p /tmp/cu13stash && cp .gpu-carry/cu13/part.aa /tmp/cu13stash/
#   4. carry .gpu-carry/cu13/part.ab, .gpu-carry/wheels, .gpu-carry/debs:
#        mkdir -p .gpu-carry/extra && cat /tmp/cu13stash/part.aa .gpu-carry/cu13/part.ab \
#          > .gpu-carry/extra/nvidia_cutlass_dsl_libs_cu13-4.7.0-cp312-cp312-manylinux_2_28_x86_64.whl \
#          && benchmarks/gpu/run.sh examples
#   5. carry .gpu-carry/wheels, .gpu-carry/debs:  benchmarks/gpu/run.sh measure
#
# The comparison with the reference (run.sh real-jobs) also needs .gpu-carry/reference/: the
# reference's wheel, what its server needs that the GPU machine lacks, and bubblewrap (its
# default sandbox). It is kept out of wheels/ (which run.sh installs for our workers) and,
# at 10 MB, out of call 4, which would pass the 64 MiB a call may carry; it goes with part.aa:
#
#   1. carry .gpu-carry/part.aa, .gpu-carry/reference:
#        mkdir -p /tmp/kcoral-carry && cp -r .gpu-carry/reference /tmp/kcoral-carry/ \
#          && benchmarks/gpu/run.sh stash
#   2. and 3. as above (2 with stash, no build needed)
#   4. carry .gpu-carry/cu13/part.ab, .gpu-carry/wheels, .gpu-carry/debs:
#        mkdir -p .gpu-carry/extra && cat /tmp/cu13stash/part.aa .gpu-carry/cu13/part.ab \
#          > .gpu-carry/extra/nvidia_cutlass_dsl_libs_cu13-4.7.0-cp312-cp312-manylinux_2_28_x86_64.whl \
#          && benchmarks/gpu/run.sh real-jobs
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=.gpu-carry
mkdir -p "$carry/debs" "$carry/wheels"
(cd "$carry/debs" && apt-get download libsimdjson-dev libsimdjson14 libcli11-dev nlohmann-json3-dev \
  libseccomp-dev libseccomp2)
download() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$1" "${@:2}"
}
download "$carry/wheels" "apache-tvm-ffi==0.1.15.post2" "nvidia-cutlass-dsl==4.7.0" \
  "nvidia-cutlass-dsl-libs-base==4.7.0" "nvidia-cutlass-dsl-libs-core==4.7.0" \
  "nvidia-cuda-nvdisasm>=13.3,<14" "protobuf>=6.30.2,<7" ml_dtypes
# The reference, kcoral 0.1.1, and its server's needs in the versions of .cache/reference-venv,
# but for cupti-python: 13.0, as the machine's CUPTI (nvidia-cuda-cupti 13.0) and driver are.
# There already: httpx, numpy, torch, triton; ml_dtypes and protobuf come in wheels/. grpcio
# is left out: only its router mode imports it.
mkdir -p "$carry/reference"
download "$carry/reference" "kcoral==0.1.1" "cupti-python==13.0.1" "fastapi==0.165.0" \
  "starlette==1.10.0" "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types==0.8.0" \
  "annotated-doc==0.0.7" "typing-inspection==0.4.5" "typing-extensions==4.16.0" \
  "opentelemetry-api==1.45.2" "uvicorn==0.55.0" "click==8.5.1" "anyio==4.16.0"
(cd "$carry/reference" && apt-get download bubblewrap)
if [[ ! -f $carry/part.ab ]]; then
  work=$(mktemp -d)
  download "$work" "apache-tvm==0.27.0.post1"
  mkdir -p "$work/tvm" "$work/tar/big"
  (cd "$work/tvm" && unzip -q "$work"/apache_tvm-*.whl)
  tar -C "$work/tvm" -cJf "$work/tar/big/tvm.tar.xz" .   # xz: 65 MB against the wheel's 100
  tar -C "$work/tar" -cf "$work/big.tar" big
  (cd "$carry" && split -b 36m "$work/big.tar" part.)
  rm -rf "$work"
fi
if [[ ! -f $carry/cu13/part.ab ]]; then
  work=$(mktemp -d)
  download "$work" "nvidia-cutlass-dsl-libs-cu13==4.7.0"
  mkdir -p "$carry/cu13"
  (cd "$carry/cu13" && split -b 45m "$work"/nvidia_cutlass_dsl_libs_cu13-*.whl part.)
  rm -rf "$work"
fi
du -sh "$carry"/*
