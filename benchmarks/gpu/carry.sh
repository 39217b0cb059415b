#!/usr/bin/env bash
# Prepares what the GPU check brings to the GPU machine (shared/device/GPU-MACHINE.md), in
# .gpu-carry/ (git-ignored): the Debian packages the build needs there (debs/), the Python
# wheels its examples need (wheels/), and TVM's wheel, too big for one call, as
# big.tar = big/tvm.tar.xz split into part.aa and part.ab. Safe to run again.
#
#   call 1: carry .gpu-carry/part.aa and .gpu-carry/debs, run `benchmarks/gpu/run.sh build`
#   call 2 (within the machine's warm time): carry .gpu-carry/part.ab and
#           .gpu-carry/wheels, run `benchmarks/gpu/run.sh`
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
du -sh "$carry"/*
