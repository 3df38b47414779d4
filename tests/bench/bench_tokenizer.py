"""Tokenizer speed: kgym's C tokenizer against Hugging Face `tokenizers` on the real Qwen3
tokenizer, over a ~1 MB deterministic mixed corpus (English prose, code, numbers, CJK, emoji,
whitespace runs), split into documents of a few KB.

kgym: `kgym-policy tokenize --jsonl --time` (one process, one thread; the time printed covers
encoding only, not loading). HF: `Tokenizer.encode` in a loop (one thread) and `encode_batch`
(rayon, every core). The ids must be equal; the table gives tokens/s.

usage: bench_tokenizer.py [--tokenizer DIR] [--mb 1.0] [--repeat 3] [--kgym build/kgym-policy]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROSE = ("The kernel reads each tile of the matrix into shared memory, synchronises the block, "
         "and accumulates the partial products in registers before it writes the result back. "
         "It's faster when the loads are coalesced; we'll measure it against cuBLAS and "
         "torch.compile, and the agent's reward depends on the speed-up it achieves.")
CODE = '''__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int row = blockIdx.x;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, x[row * n + i]);
    m = warp_reduce_max(m);
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += __expf(x[row * n + i] - m);
}

def forward(self, x):
    return torch.nn.functional.gelu(self.linear(x)) * 0.5  # fused later
'''
OTHER = ["数据并行和张量并行是两种常见的训练方法。", "東京の天気は晴れです。", "모델을 학습합니다.",
         "Привет, мир! Это тест.", "مرحبا بالعالم", "🚀🔥 launch 👍🏽 ok ✅", "café naïve façade",
         "1234567890 3.14159 2.71828 1e-6 0xDEADBEEF", "\t\t    \n\n\r\n   "]


def corpus(megabytes, seed=7):
    """Documents of 2-8 KB mixing prose, code, numbers and other scripts, deterministic."""
    rng = random.Random(seed)
    docs, total = [], 0
    words = re.findall(r"\S+|\s+", PROSE)
    while total < megabytes * 1e6:
        parts, size = [], rng.randint(2000, 8000)
        while sum(map(len, parts)) < size:
            r = rng.random()
            if r < 0.5:
                start = rng.randrange(len(words))
                parts.append("".join(words[start:start + rng.randint(5, 40)]) + " ")
            elif r < 0.75:
                lines = CODE.splitlines(keepends=True)
                start = rng.randrange(len(lines))
                parts.append("".join(lines[start:start + rng.randint(1, 6)]))
            elif r < 0.9:
                parts.append(rng.choice(OTHER) + rng.choice([" ", "\n", "\n\n"]))
            else:
                parts.append(str(rng.randint(0, 10 ** 12)) + rng.choice([", ", ". ", "\n"]))
        doc = "".join(parts)
        docs.append(doc)
        total += len(doc.encode())
    return docs


def run_kgym(binary, tok_dir, docs, tmp):
    path = Path(tmp) / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    p = subprocess.run([binary, "tokenize", "--tokenizer", str(tok_dir), "--file", str(path),
                        "--jsonl", "--time"], capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) tokens from (\d+) bytes in ([0-9.]+) s", p.stderr)
    ids = [json.loads(line) for line in p.stdout.split("\n")[:-1]]
    return ids, float(m.group(3))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default=str(REPO.parent / "shared" / "tokenizers" / "qwen3"))
    ap.add_argument("--mb", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs for each")
    ap.add_argument("--kgym", default=str(REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-policy"))
    args = ap.parse_args()
    from tokenizers import Tokenizer

    docs = corpus(args.mb)
    nbytes = sum(len(d.encode()) for d in docs)
    hf = Tokenizer.from_file(str(Path(args.tokenizer) / "tokenizer.json"))

    with tempfile.TemporaryDirectory() as tmp:
        kg = [run_kgym(args.kgym, args.tokenizer, docs, tmp) for _ in range(args.repeat)]
    kgym_ids, kgym_s = kg[0][0], min(s for _, s in kg)

    loop_s, hf_ids = float("inf"), None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ids = [hf.encode(d, add_special_tokens=False).ids for d in docs]
        loop_s = min(loop_s, time.perf_counter() - t0)
        hf_ids = ids
    batch_s = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        batch = hf.encode_batch(docs, add_special_tokens=False)
        batch_s = min(batch_s, time.perf_counter() - t0)
    assert [e.ids for e in batch] == hf_ids

    same = kgym_ids == hf_ids
    ntok = sum(map(len, hf_ids))
    print(f"tokenizer speed: {len(docs)} documents, {nbytes / 1e6:.2f} MB, {ntok} tokens "
          f"(Qwen3 tokenizer, {os.cpu_count()} CPUs, best of {args.repeat})")
    print(f"{'':38} {'seconds':>8} {'tokens/s':>12} {'MB/s':>7}")
    rows = [("kgym C tokenizer (1 thread)", kgym_s), ("HF tokenizers encode loop (1 thread)", loop_s),
            ("HF tokenizers encode_batch (all CPUs)", batch_s)]
    for name, s in rows:
        print(f"{name:38} {s:8.3f} {ntok / s:12.0f} {nbytes / 1e6 / s:7.2f}")
    print(f"ids equal to HF: {'yes' if same else 'NO'}; kgym / HF single-thread: {loop_s / kgym_s:.2f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
