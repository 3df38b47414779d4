#!/bin/bash
# CPU emulation check of the solutions' CUDA kernels (no GPU needed): each kernel body runs with
# one std::thread per CUDA thread (emu.h) and is compared with a double-precision reference.
# Builds in a temporary directory. usage: solutions/bundled/cpu_emu/run.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
S=$(dirname "$HERE")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
py=python3
$py "$HERE/transform.py" "$S/gemm_bias_gelu/kernels/gemm_gelu.cu" "$TMP/gemm.inc" "// config: 0 -> TF32"
$py "$HERE/transform.py" "$S/channel_softmax_gate/kernels/channel_gate.cu" "$TMP/gate.inc" "static int fused_grid"
$py "$HERE/transform.py" "$S/channel_softmax_gate/kernels/channel_gate.cu" "$TMP/gate_conc.inc" "static int fused_grid" --per-block-shared
$py "$HERE/transform.py" "$S/rms_norm/kernels/rmsnorm.cu" "$TMP/rms.inc" "// config: 0 default"
$py "$HERE/transform.py" "$S/add_layernorm/kernels/add_layernorm.cu" "$TMP/ln.inc" "// config: 0 default"
$py "$HERE/transform.py" "$S/mish_elementwise/kernels/mish.cu" "$TMP/mish.inc" "// config: 0 ->"
for t in test_gemm test_rows test_gate test_gate_conc; do
    g++ -O2 -std=c++20 -pthread -I"$HERE" -I"$TMP" "$HERE/$t.cpp" -o "$TMP/$t"
done
fail=0
"$TMP/test_gemm" 200 300 68 || fail=1          # M, N tails; K = 2 tiles + a 4-wide tail
EMU_CP_EARLY=1 "$TMP/test_gemm" 200 300 68 || fail=1  # cp.async data landing at issue
"$TMP/test_gemm" 130 136 292 || fail=1         # 10 K tiles: every pipeline stage reused
"$TMP/test_gemm" 37 45 52 1 || fail=1          # FP32 fallback kernel
"$TMP/test_rows" || fail=1
"$TMP/test_gate" || fail=1
for a in "4 6 64 8" "3 4 16384 6" "5 3 8193 4" "1 5 100 3" "6 8 4096 12"; do
    "$TMP/test_gate_conc" $a || fail=1         # B C HW grid: blocks run concurrently
done
[ $fail = 0 ] && echo "cpu_emu: all kernels match" || { echo "cpu_emu: FAILURES"; exit 1; }
# depthwise_conv_bn_hardswish: eval (float4 / scalar) and training-mode kernels, odd sizes
$py "$HERE/transform.py" "$S/depthwise_conv_bn_hardswish/kernels/dw_bn_hswish.cu" "$TMP/dw.inc" "// ---- host side"
g++ -O2 -std=c++20 -pthread -I"$HERE" -I"$TMP" "$HERE/test_depthwise_conv_bn_hardswish.cpp" -o "$TMP/test_depthwise_conv_bn_hardswish"
"$TMP/test_depthwise_conv_bn_hardswish" || { echo "cpu_emu: FAILURES (depthwise_conv_bn_hardswish)"; exit 1; }
echo "cpu_emu: depthwise_conv_bn_hardswish matches"
# conv2d_batchnorm_relu: TF32 implicit-GEMM conv (TW 128 / 64, eval and training epilogues), direct fallback
$py "$HERE/transform.py" "$S/conv2d_batchnorm_relu/kernels/conv_bn_relu.cu" "$TMP/cbr.inc" "// ---- host side: launches"
g++ -O2 -std=c++20 -pthread -I"$HERE" -I"$TMP" "$HERE/test_conv2d_batchnorm_relu.cpp" -o "$TMP/test_conv2d_batchnorm_relu"
fail=0
for a in "1 12 3 132 130 3 tc eval" "2 8 5 20 24 3 tc train" "1 16 4 64 40 3 tc eval" "1 36 2 8 8 3 tc train" \
         "2 3 5 7 5 5 direct eval" "2 3 5 7 5 3 direct train" "1 4 2 8 3 1 direct train"; do
    "$TMP/test_conv2d_batchnorm_relu" $a || fail=1   # N Cin H W Cout K path mode
done
EMU_CP_EARLY=1 "$TMP/test_conv2d_batchnorm_relu" 1 12 3 132 130 3 tc eval || fail=1
[ $fail = 0 ] && echo "cpu_emu: conv2d_batchnorm_relu matches" || { echo "cpu_emu: FAILURES (conv2d_batchnorm_relu)"; exit 1; }
# conv_transpose2d_bias_tanh: sub-pixel TF32 implicit GEMM (+ weight re-layout), direct fallback
$py "$HERE/transform.py" "$S/conv_transpose2d_bias_tanh/kernels/deconv_tanh.cu" "$TMP/dt.inc" "// ---- host side: launches"
g++ -O2 -std=c++20 -pthread -I"$HERE" -I"$TMP" "$HERE/test_conv_transpose2d_bias_tanh.cpp" -o "$TMP/test_conv_transpose2d_bias_tanh"
fail=0
for a in "1 12 3 68 70 4 2 1 0 tc" "2 20 2 8 8 4 2 1 0 tc" "1 36 2 8 8 4 2 1 0 tc" \
         "1 3 5 7 4 3 3 1 1 direct" "2 5 3 5 3 4 2 1 0 direct" "1 4 4 4 2 2 1 0 0 direct"; do
    "$TMP/test_conv_transpose2d_bias_tanh" $a || fail=1   # N Cin Hi Wi Cout K stride pad outpad path
done
EMU_CP_EARLY=1 "$TMP/test_conv_transpose2d_bias_tanh" 1 12 3 68 70 4 2 1 0 tc || fail=1
[ $fail = 0 ] && echo "cpu_emu: conv_transpose2d_bias_tanh matches" || { echo "cpu_emu: FAILURES (conv_transpose2d_bias_tanh)"; exit 1; }
# conv2d_groupnorm_silu: TF32 implicit-GEMM conv + bias + statistics, GroupNorm finalize, SiLU pass; direct fallback
$py "$HERE/transform.py" "$S/conv2d_groupnorm_silu/kernels/conv_gn_silu.cu" "$TMP/gn.inc" "// ---- host side: launches"
g++ -O2 -std=c++20 -pthread -I"$HERE" -I"$TMP" "$HERE/test_conv2d_groupnorm_silu.cpp" -o "$TMP/test_conv2d_groupnorm_silu"
fail=0
for a in "2 12 3 20 24 4 3 tc" "1 8 2 132 130 10 3 tc" "1 36 2 8 16 2 3 tc" "2 3 5 7 6 3 3 direct" "1 4 3 4 8 8 5 direct"; do
    "$TMP/test_conv2d_groupnorm_silu" $a || fail=1   # N Cin H W Cout G K path
done
EMU_CP_EARLY=1 "$TMP/test_conv2d_groupnorm_silu" 2 12 3 20 24 4 3 tc || fail=1
[ $fail = 0 ] && echo "cpu_emu: conv2d_groupnorm_silu matches" || { echo "cpu_emu: FAILURES (conv2d_groupnorm_silu)"; exit 1; }
# bmm_scale_bias_silu: 3xTF32 batched GEMM + scale/bias/SiLU epilogue, plain-TF32 variant, FP32 fallback
$py "$HERE/transform.py" "$S/bmm_scale_bias_silu/kernels/bmm_silu.cu" "$TMP/bss.inc" "// ---- host side: launches"
g++ -O2 -std=c++20 -pthread -I"$HERE" -I"$TMP" "$HERE/test_bmm_scale_bias_silu.cpp" -o "$TMP/test_bmm_scale_bias_silu"
fail=0
for a in "2 136 132 68" "1 130 136 164" "1 70 8 36 1" "3 37 45 37 2"; do
    "$TMP/test_bmm_scale_bias_silu" $a || fail=1   # BATCH M N K [mode]: M/N/K tails, 6 K tiles
done
EMU_CP_EARLY=1 "$TMP/test_bmm_scale_bias_silu" 1 130 136 100 || fail=1
[ $fail = 0 ] && echo "cpu_emu: bmm_scale_bias_silu matches" || { echo "cpu_emu: FAILURES (bmm_scale_bias_silu)"; exit 1; }
# rmsnorm_swiglu_mlp: RMSNorm, fused gate/up TF32 GEMM with SwiGLU epilogue, down GEMM; FP32 fallbacks
$py "$HERE/transform.py" "$S/rmsnorm_swiglu_mlp/kernels/swiglu_mlp.cu" "$TMP/swiglu.inc" "// ---- host side: launches"
g++ -O2 -std=c++20 -pthread -I"$HERE" -I"$TMP" "$HERE/test_rmsnorm_swiglu_mlp.cpp" -o "$TMP/test_rmsnorm_swiglu_mlp"
fail=0
for a in "136 68 132" "37 45 70 1"; do
    "$TMP/test_rmsnorm_swiglu_mlp" $a || fail=1   # M D H [fallback]
done
EMU_CP_EARLY=1 "$TMP/test_rmsnorm_swiglu_mlp" 72 36 196 || fail=1
[ $fail = 0 ] && echo "cpu_emu: rmsnorm_swiglu_mlp matches" || { echo "cpu_emu: FAILURES (rmsnorm_swiglu_mlp)"; exit 1; }
# qk_softmax_v: fused attention (3xTF32 q k^T and P v, online softmax), plain-TF32 P v variant, FP32 fallback
$py "$HERE/transform.py" "$S/qk_softmax_v/kernels/attn.cu" "$TMP/qkv.inc" "// ---- host side: launches"
g++ -O2 -std=c++20 -pthread -I"$HERE" -I"$TMP" "$HERE/test_qk_softmax_v.cpp" -o "$TMP/test_qk_softmax_v"
fail=0
for a in "1 136 100 128 5" "2 40 200 128 1" "1 20 70 128 5 1" "2 13 37 40 3 2" "1 9 33 128 1 2"; do
    "$TMP/test_qk_softmax_v" $a || fail=1   # B Lq Lk D AMP [mode]: query/key tails, 4 key tiles
done
EMU_CP_EARLY=1 "$TMP/test_qk_softmax_v" 1 130 130 128 2 || fail=1
[ $fail = 0 ] && echo "cpu_emu: qk_softmax_v matches" || { echo "cpu_emu: FAILURES (qk_softmax_v)"; exit 1; }
# gemm_groupnorm_hardswish: TF32 GEMM with fused GroupNorm/HardSwish epilogue (64/128/256-wide groups),
# unfused group sizes (GEMM + separate GroupNorm kernel), FP32 fallback
$py "$HERE/transform.py" "$S/gemm_groupnorm_hardswish/kernels/gemm_gn_hswish.cu" "$TMP/ggn.inc" "// ---- host side: launches"
g++ -O2 -std=c++20 -pthread -I"$HERE" -I"$TMP" "$HERE/test_gemm_groupnorm_hardswish.cpp" -o "$TMP/test_gemm_groupnorm_hardswish"
fail=0
for a in "136 640 68 5" "40 320 164 5" "40 512 36 2" "70 96 40 3" "33 90 37 3 2" "20 256 32 1 1"; do
    "$TMP/test_gemm_groupnorm_hardswish" $a || fail=1   # M N K G [config]
done
EMU_CP_EARLY=1 "$TMP/test_gemm_groupnorm_hardswish" 40 320 164 5 || fail=1
[ $fail = 0 ] && echo "cpu_emu: gemm_groupnorm_hardswish matches" || { echo "cpu_emu: FAILURES (gemm_groupnorm_hardswish)"; exit 1; }
# tensor-core paths with Cin not a multiple of 4 (pre-laid weights zero-pad the channel tail)
"$TMP/test_conv2d_batchnorm_relu" 1 6 3 12 5 3 tc eval || { echo "cpu_emu: FAILURES (conv2d_batchnorm_relu)"; exit 1; }
"$TMP/test_conv_transpose2d_bias_tanh" 1 5 3 4 3 4 2 1 0 tc || { echo "cpu_emu: FAILURES (conv_transpose2d_bias_tanh)"; exit 1; }
"$TMP/test_conv2d_groupnorm_silu" 1 6 3 8 6 2 3 tc || { echo "cpu_emu: FAILURES (conv2d_groupnorm_silu)"; exit 1; }
echo "cpu_emu: conv solutions match"
# the level-3 solutions: each has its own script (qkv GEMM / causal flash attention / proj GEMM;
# fused conv + ReLU + max-pool and the split-K Linear)
"$HERE/run_causal_self_attention.sh"
"$HERE/run_conv_relu_maxpool_linear.sh"
