#!/usr/bin/env bash
# kgym issue 8: `kgym-policy-cuda bench` and the PyTorch reference (bench_torch.py: HF
# transformers, bf16, SDPA, fused AdamW; HF generate) on the same Qwen2.5-0.5B-shaped model with
# random weights, one after the other on the same GPU, then a side-by-side table (compare.py)
# with the issue's targets marked reached / NOT reached:
#   train tokens/s >= PyTorch's and MFU >= 40% (of the H200's measured 790 TFLOP/s bf16);
#   decode >= 1,000 tokens/s at batch 1 and >= 20,000 tokens/s at batch 64.
#
# The JSON both sides write (compare.py's docstring has the whole contract):
#   {"train": {"tokens_per_s", "tflops", "mfu" (fraction), "ms_per_step"},
#    "decode": [{"batch", "tokens_per_s", "prefill_tokens_per_s"}, ...]}
# compare.py reads it defensively (missing keys show as "-") and recomputes TFLOP/s and MFU of
# both sides from tokens/s with one formula: FLOPs/token = 6*N_matmul + 6*L*H*hd*T.
#
# usage: tests/bench/policy/run.sh [--train-batch 8] [--seq 2048] [--steps 10] [--warmup 2]
#            [--decode-batches 1,64] [--prompt 128] [--new 256] [--out DIR]
#            [--skip-kgym] [--skip-torch] [--help]
# Environment (options win over it):
#   KGYM_BENCH_TRAIN_BATCH, KGYM_BENCH_SEQ, KGYM_BENCH_STEPS, KGYM_BENCH_WARMUP,
#   KGYM_BENCH_DECODE_BATCHES, KGYM_BENCH_PROMPT, KGYM_BENCH_NEW   the options' defaults
#   KGYM_POLICY_CUDA     the kgym binary (build/kgym-policy-cuda; `make kernels` builds it)
#   KGYM_BENCH_PYTHON    the Python with torch + transformers (default: mk/venv.sh's venv)
#   KGYM_BENCH_KGYM_ARGS, KGYM_BENCH_TORCH_ARGS   extra arguments for each side, word-split
#                        (e.g. KGYM_BENCH_TORCH_ARGS=--fp32-master for kgym's precision scheme)
#   OUT                  output folder (default build/bench/policy): kgym.json, torch.json,
#                        kgym.log, torch.log, compare.json, table.txt
# --warmup goes to bench_torch.py only (the C side picks its own warm-up).
# --skip-kgym / --skip-torch reuse that side's JSON from an earlier run in the same folder.
#
# Exit status: 0 when both sides ran (whether or not the targets are reached: benchmarks report,
# they never gate); 1 when a side failed or wrote no JSON (the table still shows what there is);
# 2 for a usage error or nothing to compare.
set -uo pipefail
script=$(readlink -f "$0")
cd "$(dirname "$script")/../../.." || exit 2

# --help prints the comment block above
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$script"; }
die() { echo "policy bench: $*" >&2; exit 2; }

train_batch=${KGYM_BENCH_TRAIN_BATCH:-8}
seq=${KGYM_BENCH_SEQ:-2048}
steps=${KGYM_BENCH_STEPS:-10}
warmup=${KGYM_BENCH_WARMUP:-2}
decode_batches=${KGYM_BENCH_DECODE_BATCHES:-1,64}
prompt=${KGYM_BENCH_PROMPT:-128}
new=${KGYM_BENCH_NEW:-256}
out=${OUT:-build/bench/policy}
run_kgym=1
run_torch=1

need_value() { [ $# -ge 2 ] || die "$1 needs a value (--help)"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --train-batch) need_value "$@"; train_batch=$2; shift 2 ;;
        --seq) need_value "$@"; seq=$2; shift 2 ;;
        --steps) need_value "$@"; steps=$2; shift 2 ;;
        --warmup) need_value "$@"; warmup=$2; shift 2 ;;
        --decode-batches) need_value "$@"; decode_batches=$2; shift 2 ;;
        --prompt) need_value "$@"; prompt=$2; shift 2 ;;
        --new) need_value "$@"; new=$2; shift 2 ;;
        --out) need_value "$@"; out=$2; shift 2 ;;
        --skip-kgym) run_kgym=0; shift ;;
        --skip-torch) run_torch=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option $1 (--help)" ;;
    esac
done
for pair in "train-batch:$train_batch" "seq:$seq" "steps:$steps" "warmup:$warmup" \
            "prompt:$prompt" "new:$new"; do
    [[ ${pair#*:} =~ ^[0-9]+$ ]] || die "--${pair%%:*} ${pair#*:}: expected a number"
done
[[ $decode_batches =~ ^[0-9]+(,[0-9]+)*$ ]] ||
    die "--decode-batches $decode_batches: expected e.g. 1,64"

kgym_bin=${KGYM_POLICY_CUDA:-build/kgym-policy-cuda}
if [ -n "${KGYM_BENCH_PYTHON:-}" ]; then
    python=$KGYM_BENCH_PYTHON
elif venv=$(mk/venv.sh); then
    python=$venv/bin/python
else
    echo "policy bench: mk/venv.sh failed; trying python3" >&2
    python=python3
fi
mkdir -p "$out" || die "cannot create $out"

echo "=== policy bench: B $train_batch x T $seq, $steps steps; decode batches $decode_batches," \
    "prompt $prompt + $new new; figures in $out"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
else
    echo "policy bench: nvidia-smi not found (no GPU?): both sides will fail" >&2
fi

rc=0
# run_side NAME JSON COMMAND...: runs one side with its output shown and kept in NAME.log; a
# failure or a missing JSON sets rc=1. The old JSON is removed first so that a failed run
# cannot show stale figures.
run_side() {
    local name=$1 json=$2
    shift 2
    rm -f "$json"
    echo "=== $name: $*"
    local t0=$EPOCHREALTIME
    "$@" 2>&1 | tee "$out/$name.log"
    local status=${PIPESTATUS[0]}
    awk -v a="$t0" -v b="$EPOCHREALTIME" -v n="$name" -v s="$status" \
        'BEGIN { printf "=== %s: exit %d, %.1f s\n", n, s, b - a }'
    if [ "$status" -ne 0 ]; then
        echo "policy bench: $name failed (exit $status)" >&2
        rc=1
    elif [ ! -s "$json" ]; then
        echo "policy bench: $name wrote no $json" >&2
        rc=1
    fi
}

if [ "$run_kgym" = 1 ]; then
    if [ -x "$kgym_bin" ]; then
        # shellcheck disable=SC2086  # extra arguments are meant to be word-split
        run_side kgym "$out/kgym.json" "$kgym_bin" bench --shape qwen2.5-0.5b \
            --train-batch "$train_batch" --seq "$seq" --steps "$steps" \
            --decode-batches "$decode_batches" --prompt "$prompt" --new "$new" \
            --json "$out/kgym.json" ${KGYM_BENCH_KGYM_ARGS:-}
    else
        echo "policy bench: $kgym_bin not found (make kernels builds it;" \
            "KGYM_POLICY_CUDA names another)" >&2
        rm -f "$out/kgym.json"
        rc=1
    fi
fi
if [ "$run_torch" = 1 ]; then
    # shellcheck disable=SC2086
    run_side torch "$out/torch.json" "$python" tests/bench/policy/bench_torch.py \
        --shape qwen2.5-0.5b --train-batch "$train_batch" --seq "$seq" --steps "$steps" \
        --warmup "$warmup" --decode-batches "$decode_batches" --prompt "$prompt" --new "$new" \
        --json "$out/torch.json" ${KGYM_BENCH_TORCH_ARGS:-}
fi

echo "=== side by side"
"$python" tests/bench/policy/compare.py --kgym "$out/kgym.json" --torch "$out/torch.json" \
    --seq "$seq" --json "$out/compare.json" | tee "$out/table.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 2
exit "$rc"
