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
cp "$BUILD/kgym-env" carry/bin/
cc -std=c11 -D_GNU_SOURCE -O2 -Ienv -static -o carry/bin/kgym-sandbox env/launcher/*.c \
    env/sandbox/profile.c env/sandbox/seccomp.c env/util/strbuf.c env/util/fileio.c \
    -lseccomp -lcap 2> >(grep -v "statically linked applications" >&2)
# libmicrohttpd and its TLS chain (glibc, jansson, pcre2, seccomp, cap and crypto are there)
for lib in libmicrohttpd.so.12 libgnutls.so.30 libp11-kit.so.0 libidn2.so.0 libunistring.so.2 \
           libtasn1.so.6 libnettle.so.8 libhogweed.so.6 libgmp.so.10 libffi.so.8; do
    cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')" carry/lib/
done
du -sh carry
