"""kgym-policy --device and --stop on the CPU build (build/kgym-policy, what CI has).

The CPU build refuses --device cuda with a message pointing at build/kgym-policy-cuda; cpu and
auto run the CPU reference and say so in their JSON. --stop cuts the output after the token that
completes the first stop string; the expected cut is computed here from a free run's tokens with
HF's tokenizer. The CUDA binary's --device cuda is checked on a GPU machine, not here.
"""
import json
import os
import subprocess

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen3Config

# as test_model.py: sleeping OpenMP threads on a loaded 2-core CI machine
ENV = dict(os.environ, OMP_NUM_THREADS="2", OMP_WAIT_POLICY="passive")
NO_CUDA = "this build has no CUDA; build build/kgym-policy-cuda with `make kernels` (needs nvcc)"


def kgym(kgym_policy, *args, stdin=None):
    return subprocess.run([kgym_policy, *map(str, args)], capture_output=True, text=True,
                          input=stdin, timeout=120, env=ENV)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Qwen2 without a tokenizer (ids only)."""
    torch.manual_seed(41)
    cfg = Qwen2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=48, vocab_size=200, tie_word_embeddings=True, eos_token_id=3,
                      max_position_embeddings=256)
    d = tmp_path_factory.mktemp("tiny")
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def tiny_qwen3(qwen3_tokenizer_dir, tmp_path_factory):
    """A tiny Qwen3 over the real Qwen3 tokenizer (text in and out, for --stop)."""
    tok = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir)
    torch.manual_seed(3)
    cfg = Qwen3Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      head_dim=16, intermediate_size=48, vocab_size=151936, tie_word_embeddings=True,
                      eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), max_position_embeddings=256)
    d = tmp_path_factory.mktemp("tiny_qwen3")
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(d)
    return d, tok


def test_help_names_the_device_option(kgym_policy):
    for cmd in ("generate", "score", "chat"):
        h = kgym(kgym_policy, cmd, "--help")
        assert h.returncode == 0
        assert "--device D" in h.stdout and "auto (default), cuda or cpu" in h.stdout
        assert "This binary is CPU only: build/kgym-policy-cuda has CUDA." in h.stdout
    for cmd in ("generate", "chat"):
        assert "--stop TEXT" in kgym(kgym_policy, cmd, "--help").stdout


def test_cpu_build_refuses_cuda(tiny, kgym_policy):
    for cmd in (["generate", "--ids", "[1, 2]"], ["score", "--ids", "[1, 2]"],
                ["chat", "--template", "qwen3"]):
        p = kgym(kgym_policy, cmd[0], "--model", tiny, *cmd[1:], "--device", "cuda", stdin="[]")
        assert p.returncode == 1, (cmd, p.stderr)
        assert p.stderr == f"kgym-policy {cmd[0]}: {NO_CUDA}\n"
        assert p.stdout == ""


def test_bad_device_is_a_usage_error(tiny, kgym_policy):
    for cmd in (["generate", "--ids", "[1]"], ["score", "--ids", "[1]"], ["chat", "--template", "qwen3"]):
        p = kgym(kgym_policy, cmd[0], "--model", tiny, *cmd[1:], "--device", "gpu")
        assert p.returncode == 2 and "--device takes auto, cuda or cpu" in p.stderr


def test_cpu_and_auto_run_the_reference(tiny, kgym_policy):
    gen = ["generate", "--model", tiny, "--ids", "[5, 6, 7, 8]", "--max-new", 12, "--json"]
    runs = {dev: json.loads(kgym(kgym_policy, *gen, *(["--device", dev] if dev else [])).stdout)
            for dev in ("cpu", "auto", None)}
    assert all(r["device"] == "cpu" for r in runs.values())
    assert runs["cpu"]["ids"] == runs["auto"]["ids"] == runs[None]["ids"]
    assert "logprobs" not in runs["cpu"]  # the GPU's per-token log-probs only
    score = ["score", "--model", tiny, "--ids", "[5, 6, 7, 8, 9]"]
    cpu, auto = (json.loads(kgym(kgym_policy, *score, "--device", d).stdout) for d in ("cpu", "auto"))
    assert cpu == auto and cpu["device"] == "cpu" and cpu["logprobs"][0] is None
    assert all(isinstance(x, float) for x in cpu["logprobs"][1:])


def _expected_cut(tok, ids, stops):
    """Tokens kept: up to the first prefix whose text holds a stop string (None: no cut)."""
    for k in range(len(ids)):
        text = tok.decode(ids[:k + 1], clean_up_tokenization_spaces=False)
        if any(s in text for s in stops):
            return k + 1
    return None


def _boundary_stop(tok, ids):
    """A stop string across a token boundary: the last character of an ASCII token and the first
    of the ASCII token after it (the last such pair: the cut then falls inside the run)."""
    for j in reversed(range(len(ids) - 1)):
        a, b = (tok.decode([i], clean_up_tokenization_spaces=False) for i in ids[j:j + 2])
        if a and b and a.isascii() and b.isascii():
            return a[-1] + b[0]
    pytest.fail(f"no two ASCII tokens in a row in {ids}")


def test_stop_cuts_after_the_completing_token(tiny_qwen3, qwen3_tokenizer_dir, kgym_policy):
    d, tok = tiny_qwen3
    base = ["generate", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--prompt", "def relu(x):",
            "--max-new", 24, "--temperature", 1, "--seed", 5, "--json"]
    free = json.loads(kgym(kgym_policy, *base).stdout)
    stop = _boundary_stop(tok, free["ids"])
    cut = _expected_cut(tok, free["ids"], [stop])
    assert cut is not None
    p = kgym(kgym_policy, *base, "--stop", stop, "--stop", "never said, not once")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["ids"] == free["ids"][:cut] and out["finish_reason"] == "stop"
    assert stop in out["text"] and stop not in tok.decode(out["ids"][:-1])
    missing = json.loads(kgym(kgym_policy, *base, "--stop", "never said, not once").stdout)
    assert missing["ids"] == free["ids"] and missing["finish_reason"] == free["finish_reason"]
    # a prompt that reads "--stop" is a prompt, not the option
    p = kgym(kgym_policy, "generate", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--prompt", "--stop",
             "--max-new", 2, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["prompt_ids"] == tok("--stop")["input_ids"]


def test_stop_in_chat(tiny_qwen3, qwen3_tokenizer_dir, kgym_policy):
    d, tok = tiny_qwen3
    base = ["chat", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--template", "qwen3", "--max-new", 16,
            "--json", "--device", "cpu"]
    conv = json.dumps([{"role": "user", "content": "Make relu fast."}])
    free = json.loads(kgym(kgym_policy, *base, stdin=conv).stdout)
    assert free["device"] == "cpu"
    stop = _boundary_stop(tok, free["ids"])
    out = json.loads(kgym(kgym_policy, *base, "--stop", stop, stdin=conv).stdout)
    assert out["ids"] == free["ids"][:_expected_cut(tok, free["ids"], [stop])]
    assert out["finish_reason"] == "stop"


def test_stop_usage(tiny, kgym_policy):
    gen = ["generate", "--model", tiny, "--ids", "[5, 6]"]
    assert kgym(kgym_policy, *gen, "--stop", "").returncode == 2
    assert kgym(kgym_policy, *gen, "--stop").returncode == 2
    many = [a for i in range(17) for a in ("--stop", f"s{i}")]
    assert kgym(kgym_policy, *gen, *many).returncode == 2
    p = kgym(kgym_policy, *gen, "--stop", "x")  # no tokenizer to read text with
    assert p.returncode == 1 and "tokenizer" in p.stderr


NEEDS_CUDA_BUILD = "needs the CUDA build (build/kgym-policy-cuda, `make kernels`)"


def test_bench_help_and_cpu_refusal(kgym_policy):
    h = kgym(kgym_policy, "bench", "--help")
    assert h.returncode == 0 and h.stdout.startswith("usage: kgym-policy bench")
    assert "6 * N_matmul + 6 * L * H * hd * T" in h.stdout and "--decode-batches" in h.stdout
    assert "--no-graphs" in h.stdout and "--no-pdl" in h.stdout
    assert "bench" in kgym(kgym_policy, "--help").stdout
    p = kgym(kgym_policy, "bench")
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr == f"kgym-policy bench: {NEEDS_CUDA_BUILD}\n"


def test_bench_usage_errors(kgym_policy):
    for args in (["--seq", "0"], ["--new", "1"], ["--decode-batches", "1,x"], ["--decode-batches", ""],
                 ["--shape", "gpt2"], ["--shape", "qwen2.5-0.5b", "--model", "/tmp"],
                 ["--skip-train", "--skip-decode"], ["--train-batch", "8", "--seq", str(1 << 22)],
                 ["--peak-tflops", "0"], ["--steps"], ["--frobnicate"],
                 ["--graphs", "--no-graphs"]):
        p = kgym(kgym_policy, "bench", *args)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.startswith("kgym-policy bench: ") and len(p.stderr.splitlines()) == 1


# ---- kgym-policy-cuda on a GPU machine --------------------------------------------------------
# Defined only when KGYM_POLICY_CUDA names the CUDA build (e.g. build/kgym-policy-cuda, from
# `make kernels`) on a machine with a GPU: `make test` (CPU, where a skip fails the run) never
# collects them. bf16 on the GPU against fp32 here: log-probabilities agree to BF16_TOL.

CUDA_BIN = os.environ.get("KGYM_POLICY_CUDA")
BF16_TOL = 0.1  # |log p| of a few to ~12 nats, logits from bf16 weights and activations

if CUDA_BIN:

    @pytest.fixture(scope="module")
    def gpu_qwen3(qwen3_tokenizer_dir, tmp_path_factory):
        """A tiny Qwen3 the GPU takes (head_dim 64) over the real Qwen3 tokenizer."""
        tok = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir)
        torch.manual_seed(7)
        cfg = Qwen3Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=64, intermediate_size=192, vocab_size=151936, tie_word_embeddings=True,
                          eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), max_position_embeddings=512,
                          initializer_range=0.05)
        d = tmp_path_factory.mktemp("gpu_qwen3")
        AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(d)
        return d, tok

    def test_cuda_help_and_auto(gpu_qwen3, qwen3_tokenizer_dir):
        d, _ = gpu_qwen3
        assert "This binary has CUDA." in kgym(CUDA_BIN, "generate", "--help").stdout
        p = kgym(CUDA_BIN, "generate", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--prompt", "hi",
                 "--max-new", 4, "--json")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["device"] == "cuda"  # auto takes the GPU

    def test_cuda_score_matches_cpu(gpu_qwen3, qwen3_tokenizer_dir):
        d, _ = gpu_qwen3
        args = ["score", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--text",
                "def relu(x):\n    return max(x, 0)\n"]
        cpu, gpu = (json.loads(kgym(CUDA_BIN, *args, "--device", dev).stdout) for dev in ("cpu", "cuda"))
        assert cpu["device"] == "cpu" and gpu["device"] == "cuda" and cpu["ids"] == gpu["ids"]
        assert gpu["logprobs"][0] is None
        assert max(abs(a - b) for a, b in zip(cpu["logprobs"][1:], gpu["logprobs"][1:])) < BF16_TOL

    def test_cuda_generate_logprobs_match_cpu_score(gpu_qwen3, qwen3_tokenizer_dir):
        d, _ = gpu_qwen3
        p = kgym(CUDA_BIN, "generate", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--prompt",
                 "def relu(x):", "--max-new", 24, "--device", "cuda", "--json")
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert out["device"] == "cuda" and out["finish_reason"] in ("eos", "length")
        assert len(out["logprobs"]) == len(out["ids"]) > 0
        ids = out["prompt_ids"] + out["ids"]
        cpu = json.loads(kgym(CUDA_BIN, "score", "--model", d, "--ids", json.dumps(ids), "--device",
                              "cpu").stdout)["logprobs"][len(out["prompt_ids"]):]
        assert max(abs(a - b) for a, b in zip(cpu, out["logprobs"])) < BF16_TOL

    def test_cuda_sampling_seeded_and_max_new_zero(gpu_qwen3):
        d, _ = gpu_qwen3
        args = ["generate", "--model", d, "--ids", "[5, 6, 7]", "--max-new", 16, "--temperature", 1.5,
                "--top-k", 50, "--top-p", 0.95, "--device", "cuda", "--json"]
        runs = [json.loads(kgym(CUDA_BIN, *args, "--seed", s).stdout)["ids"] for s in (1, 1, 2, 3)]
        assert runs[0] == runs[1] and (runs[0] != runs[2] or runs[0] != runs[3])
        none = json.loads(kgym(CUDA_BIN, "generate", "--model", d, "--ids", "[5]", "--max-new", 0,
                               "--device", "cuda", "--json").stdout)
        assert none["ids"] == [] and none["finish_reason"] == "length"

    def test_cuda_stop(gpu_qwen3, qwen3_tokenizer_dir):
        d, tok = gpu_qwen3
        base = ["generate", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--prompt", "def relu(x):",
                "--max-new", 24, "--temperature", 1, "--seed", 5, "--device", "cuda", "--json"]
        free = json.loads(kgym(CUDA_BIN, *base).stdout)
        stop = _boundary_stop(tok, free["ids"])
        out = json.loads(kgym(CUDA_BIN, *base, "--stop", stop).stdout)
        assert out["ids"] == free["ids"][:_expected_cut(tok, free["ids"], [stop])]
        assert out["finish_reason"] == "stop" and len(out["logprobs"]) == len(out["ids"])

    def test_cuda_chat(gpu_qwen3, qwen3_tokenizer_dir):
        d, _ = gpu_qwen3
        conv = json.dumps([{"role": "user", "content": "Make relu fast."}])
        p = kgym(CUDA_BIN, "chat", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--template", "qwen3",
                 "--max-new", 8, "--device", "cuda", "--json", stdin=conv)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["device"] == "cuda"

    def test_cuda_refuses_head_dim_it_lacks(tiny):
        """The tiny Qwen2 has head_dim 16: the GPU's attention takes 64 or 128."""
        p = kgym(CUDA_BIN, "generate", "--model", tiny, "--ids", "[1, 2]", "--device", "cuda")
        assert p.returncode == 1 and "head_dim" in p.stderr and "--device cpu" in p.stderr
        assert len(p.stderr.splitlines()) == 1


    def test_cuda_bench_small(tmp_path):
        """A short run of the real shape: the figures are there and positive."""
        out = tmp_path / "bench.json"
        p = subprocess.run([CUDA_BIN, "bench", "--shape", "qwen2.5-0.5b", "--train-batch", "1", "--seq", "256",
                            "--steps", "2", "--decode-batches", "2", "--prompt", "16", "--new", "8", "--json",
                            str(out)], capture_output=True, text=True, timeout=600, env=ENV)
        assert p.returncode == 0, p.stderr
        assert "train  B 1 x T 256:" in p.stdout and "decode batch 2 (graphs, pdl):" in p.stdout
        j = json.loads(out.read_text())
        t = j["train"]
        assert t["tokens_per_s"] > 0 and 0 < t["mfu"] < 1 and t["activation_bytes"] > 0
        # 6 * (matmul weights) + 6 * L * H * hd * T for the 0.5B shape at T = 256
        assert j["n_params_matmul"] == 493961216
        assert t["flops_per_token"] == 6 * 493961216 + 6 * 24 * 14 * 64 * 256
        assert [d["batch"] for d in j["decode"]] == [2]
        d = j["decode"][0]
        assert d["tokens_per_s"] > 0 and d["prefill_tokens_per_s"] > 0 and d["end_to_end_tokens_per_s"] > 0
        assert d["graphs"] is True and d["pdl"] is True  # the decoder's defaults
