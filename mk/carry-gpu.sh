#!/usr/bin/env bash
# Prepares carry/ (gitignored) for a GPU machine that has no package registry and lacks
# libmicrohttpd, the libseccomp/libcap headers and libutf8proc (the H100/H200 machines):
#   carry/bin       build/kgym-env and kgym-bench as built here, and a statically linked launcher
#                   beside them (the server finds kgym-sandbox next to its own binary)
#   carry/lib       every shared library those and the CUDA programs need but glibc's own and
#                   CUDA's (the GPU machine has its own CUDA)
#   carry/w         kgym-env and kgym-bench wrappers that set LD_LIBRARY_PATH for them alone
#                   (not for the Python with torch they start)
#   carry/kbin.tar.xz  the CUDA programs of `make kernels`, stripped (when built here)
#   carry/kernelbench, carry/tok.tar.xz  KernelBench's JSONL and Qwen3's tokenizer (../shared
#                   does not travel)
# tests/gpu/calls/*.sh run there from the repo root, with `carry` carried (see its README).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
make -s all
mkdir -p carry/bin carry/lib carry/w
cp "$BUILD/kgym-env" "$BUILD/kgym-bench" carry/bin/
cc -std=c11 -D_GNU_SOURCE -O2 -Ienv -static -o carry/bin/kgym-sandbox env/launcher/*.c \
    env/sandbox/profile.c env/sandbox/seccomp.c env/util/strbuf.c env/util/fileio.c \
    -lseccomp -lcap 2> >(grep -v "statically linked applications" >&2)
for b in kgym-env kgym-bench; do
    printf '%s\n' '#!/bin/sh' \
        "# the carried $b with the carried shared libraries, for it alone" \
        'd=$(cd "$(dirname "$0")/.." && pwd)' \
        "LD_LIBRARY_PATH=\$d/lib exec \"\$d/bin/$b\" \"\$@\"" > "carry/w/$b"
    chmod +x "carry/w/$b"
done
cuda_bins=()
if [ -x "$BUILD/kgym-policy-cuda" ]; then
    cuda_bins=("$BUILD/kgym-policy-cuda" "$BUILD/tests/policy-gpu-check" "$BUILD"/kernels/test_*
               "$BUILD"/kernels/ctest_* "$BUILD/kernels/bench_matmul")
fi
# every shared library these need but glibc's own and CUDA's
for lib in $(ldd "$BUILD/kgym-env" "$BUILD/kgym-bench" "${cuda_bins[@]}" | awk '$3 ~ /^\// { print $3 }' | sort -u); do
    case "$(basename "$lib")" in
        libc.so.*|libm.so.*|libresolv.so.*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
        libcuda.so.*|libcudart*|libcublas*|libnccl*|libnvidia*|libnvrtc*) ;;  # the machine's CUDA
        libstdc++.so.*|libgcc_s.so.*|libgomp.so.*) ;;  # the machine's compiler runtime
        *) cp -L "$lib" carry/lib/ ;;
    esac
done
if [ ${#cuda_bins[@]} -gt 0 ]; then
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/kernels" "$stage/tests"
    cp "$BUILD/kgym-policy-cuda" "$stage/"
    cp "$BUILD/tests/policy-gpu-check" "$stage/tests/"
    # the kernel checks and the one bench the decode work reads (all the benches would pass the
    # 64 MiB a call may carry)
    cp "$BUILD"/kernels/test_* "$BUILD"/kernels/ctest_* "$BUILD/kernels/bench_matmul" "$stage/kernels/"
    strip "$stage/kgym-policy-cuda" "$stage"/tests/* "$stage"/kernels/*
    tar -C "$stage" -cJf carry/kbin.tar.xz .
else
    echo "carry-gpu: no $BUILD/kgym-policy-cuda (make kernels): carry/kbin.tar.xz not made" >&2
fi
# KernelBench and the tokenizer for the programs there (../shared does not travel)
KB=${KGYM_KERNELBENCH:-../shared/kernelbench/kernelbench-l1-l3.jsonl}
if [ -f "$KB" ]; then mkdir -p carry/kernelbench && cp "$KB" carry/kernelbench/; fi
TOK=${KGYM_TEST_TOKENIZER:-../shared/tokenizers/qwen3}
if [ -f "$TOK/tokenizer.json" ]; then  # 11 MB of JSON, 2 MB compressed
    tar -C "$TOK" -cJf carry/tok.tar.xz tokenizer.json tokenizer_config.json
fi
du -sh carry
