#!/bin/bash
# CPU emulation check of conv_relu_maxpool_linear/kernels/conv_pool_linear.cu (no GPU needed): the
# fused TF32 conv + bias + ReLU + max-pool kernel and its FP32 fallback, the split-K linear
# (3xTF32 / plain TF32 / FP32 SIMT) with the split reduction + bias, and the whole forward at the
# task's tolerance on randn and probe-scaled inputs. Builds in a temporary directory.
# usage: solutions/bundled/cpu_emu/run_conv_relu_maxpool_linear.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
S=$(dirname "$HERE")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
py=python3
$py "$HERE/transform.py" "$S/conv_relu_maxpool_linear/kernels/conv_pool_linear.cu" "$TMP/crml.inc" "// ---- host side: launches"
g++ -O2 -std=c++20 -pthread -I"$HERE" -I"$TMP" "$HERE/test_conv_relu_maxpool_linear.cpp" -o "$TMP/test_conv_relu_maxpool_linear"
T="$TMP/test_conv_relu_maxpool_linear"
fail=0
# conv: N Cin H W Cout P TPH TPW path (TPH = TPW = 0: the launcher's tile choice).
# H, W not multiples of P (floor), Cout tail over two 64-channel groups; forced small tiles:
# windows wrap rows inside an m-tile, partial tiles in both directions; Cin 1 and 2; P = 1;
# the full-size geometry (224 wide: tile 8 x 56 windows, S = 227, PL = 7721), two row tiles.
for a in "2 3 37 30 70 4 0 0 tc" \
         "1 3 37 45 20 4 4 5 tc" \
         "1 2 17 19 9 3 2 3 tc" \
         "1 1 9 10 33 2 0 0 tc" \
         "1 3 7 6 5 1 0 0 tc" \
         "1 3 64 224 64 4 0 0 tc" \
         "2 4 13 11 5 3 0 0 direct" \
         "1 3 20 24 8 4 0 0 direct"; do
    "$T" conv $a || fail=1
done
# gemm: M N K SPLITS kind -- M, N tails (2 x 2 tiles), K tail (1000 = 31 x 32 + 8),
# ~10 k-tiles per split (every pipeline stage reused), and short splits (< STAGES k-tiles)
for a in "70 130 1000 3 3x" "70 300 292 3 3x" "64 232 1000 2 tf32" "5 10 36 1 3x" "37 45 50 2 fp32"; do
    "$T" gemm $a || fail=1
done
EMU_CP_EARLY=1 "$T" gemm 70 130 1000 3 3x || fail=1   # cp.async data landing at issue
# full forward vs the exact model (max err / tol must stay <= 0.5): probe-scaled inputs
for a in "16 3 24 24 64 4 130 3 3x 1" "16 3 24 24 64 4 130 3 tf32 1" "4 3 24 24 64 4 130 3 3x 0" \
         "3 3 18 17 20 4 30 2 fp32 1"; do
    "$T" full $a || fail=1
done
[ $fail = 0 ] && echo "cpu_emu: conv_relu_maxpool_linear matches" || { echo "cpu_emu: FAILURES (conv_relu_maxpool_linear)"; exit 1; }
