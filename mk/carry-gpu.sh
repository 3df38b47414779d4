#!/usr/bin/env bash
# Prepares carry/ for a GPU machine that has no package registry and lacks libmicrohttpd and the
# libseccomp/libcap headers (the H200 machines): build/kgym-env as built here plus the shared
# libraries it needs that such a machine lacks (carry/lib), and a statically linked launcher
# beside it (carry/bin; the server finds kgym-sandbox next to its own binary). There:
#   LD_LIBRARY_PATH=$PWD/carry/lib KGYM_SERVER=carry/bin/kgym-env KGYM_LAUNCHER=carry/bin/kgym-sandbox make test-gpu
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
make -s all
mkdir -p carry/bin carry/lib
cp "$BUILD/kgym-env" "$BUILD/kgym-bench" carry/bin/
cc -std=c11 -D_GNU_SOURCE -O2 -Ienv -static -o carry/bin/kgym-sandbox env/launcher/*.c \
    env/sandbox/profile.c env/sandbox/seccomp.c env/util/strbuf.c env/util/fileio.c \
    -lseccomp -lcap 2> >(grep -v "statically linked applications" >&2)
# every shared library kgym-env and kgym-bench (libcurl's chain) need but glibc's own
for lib in $(ldd "$BUILD/kgym-env" "$BUILD/kgym-bench" | awk '$3 ~ /^\// { print $3 }' | sort -u); do
    case "$(basename "$lib")" in
        libc.so.*|libm.so.*|libresolv.so.*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
        *) cp -L "$lib" carry/lib/ ;;
    esac
done
# KernelBench for kgym-bench there (../shared does not travel)
KB=${KGYM_KERNELBENCH:-../shared/kernelbench/kernelbench-l1-l3.jsonl}
if [ -f "$KB" ]; then mkdir -p carry/kernelbench && cp "$KB" carry/kernelbench/; fi
du -sh carry
