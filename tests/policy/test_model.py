"""The CPU reference model (policy/model.h, critic.h, adamw.h) against HF transformers and PyTorch.

Tiny random Qwen2 (q/k/v biases, tied), Qwen3 (q/k norm, head_dim != hidden/heads) and Llama 3
(with and without llama3 RoPE scaling, untied) models are built here with transformers, their
norm weights and biases pushed away from 1/0, and saved with save_pretrained. build/tests/policy-check
(tests/policy/policy_check.c) runs our C code on them and dumps safetensors; everything expected is
computed here by HF / PyTorch, never taken from an earlier run of ours.
"""
import copy
import json
import os
import pathlib
import shutil
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (AutoModel, AutoModelForCausalLM, AutoModelForTokenClassification,
                          AutoTokenizer, LlamaConfig, Qwen2Config, Qwen3Config)

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("KGYM_BUILD", "build")
CHECK = BUILD / "tests" / "policy-check"

# The models are tiny: one torch thread, and OpenMP threads that sleep rather than spin, keep a
# loaded 2-core CI machine from thrashing (two spinning thread pools make each run 10-40x slower).
torch.set_num_threads(1)
ENV = dict(os.environ, OMP_NUM_THREADS="2", OMP_WAIT_POLICY="passive")

B, T = 2, 16


# ---- models ------------------------------------------------------------------------------------

def _common(**kw):
    base = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, initializer_range=0.1,
                max_position_embeddings=256, rms_norm_eps=1e-6)
    base.update(kw)
    return base


CONFIGS = {
    "qwen2": lambda: Qwen2Config(**_common(vocab_size=320, intermediate_size=96, num_key_value_heads=2,
                                           tie_word_embeddings=True, rope_theta=1e6, eos_token_id=3)),
    "qwen3": lambda: Qwen3Config(**_common(vocab_size=384, intermediate_size=128, num_key_value_heads=2,
                                           head_dim=24, tie_word_embeddings=False, rope_theta=1e6,
                                           eos_token_id=5)),
    "llama3": lambda: LlamaConfig(**_common(
        vocab_size=448, intermediate_size=112, num_key_value_heads=1, tie_word_embeddings=False,
        rope_theta=500000.0, bos_token_id=1, eos_token_id=[2, 7],
        # original context 64: head_dim 16 then has frequencies above, inside and below the band
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "llama": lambda: LlamaConfig(**_common(vocab_size=300, intermediate_size=80, num_key_value_heads=2,
                                           tie_word_embeddings=True, rope_theta=10000.0,
                                           bos_token_id=1, eos_token_id=2)),
}
ARCHS = list(CONFIGS)


def build_hf(cfg, seed):
    torch.manual_seed(seed)
    m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:  # RMSNorm weights (and Qwen3's q/k norms) away from 1
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif name.endswith(".bias"):  # q/k/v biases away from 0
                p.copy_(0.3 * torch.randn_like(p))
    return m.eval()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (folder, HF model) for every architecture."""
    out = {}
    for i, name in enumerate(ARCHS):
        m = build_hf(CONFIGS[name](), seed=100 + i)
        d = tmp_path_factory.mktemp(name)
        m.save_pretrained(d)
        out[name] = (d, m)
    return out


def run_check(*args, ok=True):
    p = subprocess.run([str(CHECK), *map(str, args)], capture_output=True, text=True, timeout=120,
                       env=ENV)
    if ok:
        assert p.returncode == 0, f"policy-check {args[0]} failed: {p.stderr}"
    return p


def kgym(kgym_policy, *args, stdin=None):
    return subprocess.run([kgym_policy, *map(str, args)], capture_output=True, text=True,
                          input=stdin, timeout=120, env=ENV)


def make_batch(vocab, seed, with_pos_doc=False):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (B, T), generator=g)
    targets = torch.cat([ids[:, 1:], torch.full((B, 1), -1)], dim=1)
    weights = torch.rand(B, T, generator=g)
    weights[0, :3] = 0  # a masked prompt
    weights[:, -1] = 0
    values = torch.randn(B, T, generator=g)
    return {"ids": ids, "targets": targets, "weights": weights, "values": values}


def write_batch(path, batch):
    path.write_text(json.dumps({k: v.tolist() for k, v in batch.items()}))
    return path


def weighted_logprob_loss(logits, batch):
    logp = torch.log_softmax(logits.float(), dim=-1)
    t = batch["targets"]
    picked = logp.gather(-1, t.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(batch["weights"] * picked * (t >= 0)).sum()


def assert_close(ours, ref, what, rtol=1e-4, floor=1e-4):
    """Elementwise |ours - ref| <= rtol*|ref| + floor*max|ref| (an absolute floor scaled to the tensor)."""
    ours, ref = ours.double(), ref.double()
    assert ours.shape == ref.shape, f"{what}: shape {tuple(ours.shape)} vs {tuple(ref.shape)}"
    scale = ref.abs().max().item()
    bound = rtol * ref.abs() + floor * max(scale, 1e-12)
    bad = (ours - ref).abs() > bound
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {ref.numel()} elements differ; max abs diff "
                           f"{(ours - ref).abs().max().item():.3g} (scale {scale:.3g})")


# ---- forward -----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHS)
def test_logits_and_logprobs_match_hf(models, arch, tmp_path):
    d, m = models[arch]
    batch = make_batch(m.config.vocab_size, seed=1)
    run_check("logits", d, write_batch(tmp_path / "b.json", batch), tmp_path / "o.st")
    ours = load_file(tmp_path / "o.st")
    with torch.no_grad():
        ref = m(batch["ids"]).logits
    assert (ours["logits"] - ref).abs().max().item() < 1e-4
    assert ref.std() > 0.1  # the logits are not trivially flat
    logp = torch.log_softmax(ref, -1).gather(-1, batch["targets"].clamp(min=0).unsqueeze(-1))[..., 0]
    mask = batch["targets"] >= 0
    assert (ours["logprobs"][mask] - logp[mask]).abs().max().item() < 1e-4


def test_llama3_scaling_changes_logits(models, tmp_path):
    """The scaled model differs from the same weights without scaling at positions > a few, so the
    llama3 branch is really exercised (not a no-op that HF happens to match)."""
    d, m = models["llama3"]
    plain = tmp_path / "plain"
    shutil.copytree(d, plain)
    cfg = json.loads((plain / "config.json").read_text())
    cfg.pop("rope_scaling", None)
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
    (plain / "config.json").write_text(json.dumps(cfg))
    batch = make_batch(m.config.vocab_size, seed=2)
    b = write_batch(tmp_path / "b.json", batch)
    run_check("logits", d, b, tmp_path / "a.st")
    run_check("logits", plain, b, tmp_path / "p.st")
    scaled, unscaled = load_file(tmp_path / "a.st")["logits"], load_file(tmp_path / "p.st")["logits"]
    assert (scaled[:, 0] - unscaled[:, 0]).abs().max() < 1e-5  # position 0: no rotation
    assert (scaled[:, 8:] - unscaled[:, 8:]).abs().max() > 1e-3


@pytest.mark.parametrize("variant", ["bf16", "sharded", "qwen3-tied", "qwen2-untied"])
def test_storage_variants_load(variant, tmp_path):
    """bf16 storage, a sharded checkpoint (index + shards), and tied vs untied embeddings."""
    name = {"bf16": "qwen3", "sharded": "llama3", "qwen3-tied": "qwen3", "qwen2-untied": "qwen2"}[variant]
    cfg = CONFIGS[name]()
    if variant == "qwen3-tied":
        cfg.tie_word_embeddings = True
    if variant == "qwen2-untied":
        cfg.tie_word_embeddings = False
    m = build_hf(cfg, seed=7)
    d = tmp_path / "ckpt"
    if variant == "bf16":
        m.to(torch.bfloat16).save_pretrained(d)
    elif variant == "sharded":
        m.save_pretrained(d, max_shard_size="40KB")
        assert (d / "model.safetensors.index.json").exists()
        assert len(list(d.glob("model-*-of-*.safetensors"))) > 2
    else:
        m.save_pretrained(d)
    has_lm_head = "lm_head.weight" in load_file(next(d.glob("*.safetensors")))
    if variant == "qwen3-tied":
        assert not has_lm_head
    ref_model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    batch = make_batch(cfg.vocab_size, seed=3)
    run_check("logits", d, write_batch(tmp_path / "b.json", batch), tmp_path / "o.st")
    with torch.no_grad():
        ref = ref_model(batch["ids"]).logits
    assert (load_file(tmp_path / "o.st")["logits"] - ref).abs().max().item() < 1e-4


def test_packed_documents_match_separate_runs(models, tmp_path):
    """Two documents packed in one row (positions restart, attention stays inside a document) give
    what HF gives on each document alone."""
    d, m = models["qwen3"]
    g = torch.Generator().manual_seed(4)
    a, b = torch.randint(0, 384, (7,), generator=g), torch.randint(0, 384, (9,), generator=g)
    packed = {"ids": [torch.cat([a, b]).tolist()], "pos": [list(range(7)) + list(range(9))],
              "doc": [[0] * 7 + [1] * 9]}
    (tmp_path / "b.json").write_text(json.dumps(packed))
    run_check("logits", d, tmp_path / "b.json", tmp_path / "o.st")
    ours = load_file(tmp_path / "o.st")["logits"][0]
    with torch.no_grad():
        ra, rb = m(a[None]).logits[0], m(b[None]).logits[0]
    assert (ours[:7] - ra).abs().max().item() < 1e-4
    assert (ours[7:] - rb).abs().max().item() < 1e-4


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "llama3"])
def test_kv_cache_decode_matches_hf(models, arch, tmp_path):
    """The decoding path (prefill 5 tokens, then one at a time through the KV cache)."""
    d, m = models[arch]
    batch = make_batch(m.config.vocab_size, seed=5)
    run_check("decode", d, write_batch(tmp_path / "b.json", {"ids": batch["ids"]}), tmp_path / "o.st",
              "--prefill", 5)
    with torch.no_grad():
        ref = m(batch["ids"]).logits
    ours = load_file(tmp_path / "o.st")["logits"]
    assert (ours[:, 4:] - ref[:, 4:]).abs().max().item() < 1e-4


# ---- backward, optimizer -----------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHS)
def test_gradients_match_autograd(models, arch, tmp_path):
    d, m = models[arch]
    batch = make_batch(m.config.vocab_size, seed=6)
    run_check("grads", d, write_batch(tmp_path / "b.json", batch), tmp_path / "g.st")
    ours = load_file(tmp_path / "g.st")
    m.zero_grad()
    loss = weighted_logprob_loss(m(batch["ids"]).logits, batch)
    loss.backward()
    assert abs(ours["loss"].item() - loss.item()) <= 1e-5 * abs(loss.item())
    names = {n for n, _ in m.named_parameters()}
    assert set(ours) - {"loss"} == names
    for n, p in m.named_parameters():
        assert p.grad.abs().max() > 0, n
        assert_close(ours[n], p.grad, f"grad {n}")
    m.zero_grad()


def assert_adam_close(ours, ref, lr, what):
    """Parameters after AdamW steps. Adam divides each gradient by its own running RMS, so an
    element whose gradient is near zero (where fp32 rounding decides even its sign) may move by up
    to lr per step either way: a few such elements may differ by a small fraction of lr. Every
    other element must agree tightly, which is what catches a wrong formula (bias correction, eps
    placement, decay order), since those shift every element."""
    diff = (ours.double() - ref.double()).abs()
    tight = diff > 1e-4 * ref.double().abs() + 1e-5 * ref.abs().max().item()
    assert tight.float().mean().item() <= 2e-3, f"{what}: {int(tight.sum())} of {ref.numel()} elements differ"
    assert diff.max().item() <= 0.01 * lr, f"{what}: max abs diff {diff.max().item():.3g}"


def hf_adamw_run(m, batch, steps, lr, betas, eps, wd, clip=None, loss_fn=None):
    opt = torch.optim.AdamW(m.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=wd)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(m)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("mode", ["plain", "clip", "resume"])
def test_adamw_matches_torch(models, mode, tmp_path):
    """10 AdamW steps vs torch.optim.AdamW: losses per step and final parameters. 'clip' adds
    clip_grad_norm_; 'resume' saves model + optimizer state after 5 steps and loads them back."""
    d, m0 = models["qwen3" if mode != "clip" else "llama3"]
    m = copy.deepcopy(m0)
    batch = make_batch(m.config.vocab_size, seed=8)
    lr, betas, eps, wd, clip = 1e-2, (0.9, 0.95), 1e-8, 0.1, (0.5 if mode == "clip" else None)
    args = ["adamw", d, write_batch(tmp_path / "b.json", batch), tmp_path / "o.st", "--steps", 10,
            "--lr", lr, "--beta1", betas[0], "--beta2", betas[1], "--eps", eps, "--wd", wd]
    if clip:
        args += ["--clip", clip]
    if mode == "resume":
        args += ["--resume-at", 5, "--scratch", tmp_path / "resume"]
    run_check(*args)
    ours = load_file(tmp_path / "o.st")
    losses = hf_adamw_run(m, batch, 10, lr, betas, eps, wd, clip,
                          lambda mm: weighted_logprob_loss(mm(batch["ids"]).logits, batch))
    assert losses[-1] < losses[0]  # it learns
    for i, (a, b) in enumerate(zip(ours["losses"].tolist(), losses)):
        assert abs(a - b) <= 1e-4 * abs(b), f"step {i}: loss {a} vs torch {b}"
    for n, p in m.named_parameters():
        assert_adam_close(ours[n], p.detach(), lr, f"param {n} after 10 steps")
    if mode == "resume":
        opt = load_file(tmp_path / "resume" / "optimizer.safetensors")
        names = {n for n, _ in m.named_parameters()}
        assert set(opt) == {f"{n}.exp_avg" for n in names} | {f"{n}.exp_avg_sq" for n in names}


# ---- critic ------------------------------------------------------------------------------------

class TorchCritic(torch.nn.Module):
    """The reference critic: HF's base model (trunk) + Linear(hidden -> 1)."""

    def __init__(self, d):
        super().__init__()
        self.model = AutoModel.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        self.score = torch.nn.Linear(self.model.config.hidden_size, 1)
        sd = load_file(d / "model.safetensors")
        with torch.no_grad():
            self.score.weight.copy_(sd["score.weight"])
            self.score.bias.copy_(sd["score.bias"])

    def forward(self, ids):
        return self.score(self.model(ids).last_hidden_state)[..., 0]


def value_loss(values, batch):
    return 0.5 * (batch["weights"] * (values - batch["values"]) ** 2).sum()


@pytest.fixture(scope="module")
def critic_dir(models, tmp_path_factory):
    d, _ = models["qwen3"]
    out = tmp_path_factory.mktemp("critic")
    run_check("critic-init", d, out, "--seed", 11, "--std", 0.5)
    return out


def test_critic_init_copies_trunk(models, critic_dir):
    d, m = models["qwen3"]
    sd = load_file(critic_dir / "model.safetensors")
    policy = dict(m.named_parameters())
    assert set(sd) == ({n for n in policy if n.startswith("model.")} | {"score.weight", "score.bias"})
    for n, v in sd.items():
        if n.startswith("model."):
            assert torch.equal(v, policy[n].detach()), n
    assert sd["score.weight"].shape == (1, 64) and sd["score.weight"].std() > 0.2
    assert sd["score.bias"].shape == (1,) and sd["score.bias"].item() == 0
    # the layout HF's token-classification models load
    tc = AutoModelForTokenClassification.from_pretrained(critic_dir, num_labels=1, dtype=torch.float32,
                                                         attn_implementation="eager").eval()
    ref = TorchCritic(critic_dir).eval()
    ids = torch.randint(0, 384, (1, 10))
    with torch.no_grad():
        assert (tc(ids).logits[..., 0] - ref(ids)).abs().max() < 1e-5


def test_critic_values_and_gradients(critic_dir, tmp_path):
    batch = make_batch(384, seed=12)
    run_check("critic", critic_dir, write_batch(tmp_path / "b.json", batch), tmp_path / "g.st")
    ours = load_file(tmp_path / "g.st")
    ref = TorchCritic(critic_dir).eval()
    values = ref(batch["ids"])
    loss = value_loss(values, batch)
    loss.backward()
    assert (ours["values"] - values.detach()).abs().max().item() < 1e-4
    assert abs(ours["loss"].item() - loss.item()) <= 1e-5 * abs(loss.item())
    params = dict(ref.named_parameters())
    assert set(ours) - {"loss", "values"} == set(params)
    for n, p in params.items():
        assert p.grad.abs().max() > 0, n
        assert_close(ours[n], p.grad, f"critic grad {n}")


def test_critic_adamw_matches_torch(critic_dir, tmp_path):
    batch = make_batch(384, seed=13)
    # with a save/load round trip of the critic and its optimizer after 2 steps
    run_check("adamw", critic_dir, write_batch(tmp_path / "b.json", batch), tmp_path / "o.st",
              "--critic", "--steps", 4, "--lr", 6e-3, "--wd", 0.0, "--beta2", 0.99,
              "--resume-at", 2, "--scratch", tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "critic" / "optimizer.safetensors").exists()
    assert not (tmp_path / "ckpt" / "model.safetensors").exists()  # no policy in this checkpoint
    ours = load_file(tmp_path / "o.st")
    ref = TorchCritic(critic_dir).eval()
    losses = hf_adamw_run(ref, batch, 4, 6e-3, (0.9, 0.99), 1e-8, 0.0,
                          loss_fn=lambda mm: value_loss(mm(batch["ids"]), batch))
    for a, b in zip(ours["losses"].tolist(), losses):
        assert abs(a - b) <= 1e-4 * abs(b)
    for n, p in ref.named_parameters():
        assert_adam_close(ours[n], p.detach(), 6e-3, f"critic param {n}")


# ---- checkpoints -------------------------------------------------------------------------------

@pytest.mark.parametrize("arch,dtype", [("qwen2", "F32"), ("llama3", "F32"), ("qwen3", "BF16")])
def test_saved_checkpoint_loads_in_hf(models, arch, dtype, tmp_path):
    d, m = models[arch]
    out = tmp_path / "saved"
    run_check("save", d, out, "--dtype", dtype)
    sd = load_file(out / "model.safetensors")
    assert ("lm_head.weight" in sd) == (not m.config.tie_word_embeddings)
    assert all(v.dtype == (torch.float32 if dtype == "F32" else torch.bfloat16) for v in sd.values())
    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    ref = copy.deepcopy(m)
    if dtype == "BF16":  # torch's own rounding of the same weights (parameters only: the
        with torch.no_grad():  # rotary buffer must stay fp32)
            for p in ref.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    ids = make_batch(m.config.vocab_size, seed=14)["ids"]
    with torch.no_grad():
        assert torch.equal(hf(ids).logits, ref(ids).logits)
    assert hf.generation_config.eos_token_id == m.generation_config.eos_token_id


# ---- kgym-policy: generate, score, inspect ----------------------------------------------------

@pytest.mark.parametrize("arch", ARCHS)
def test_generate_greedy_matches_hf(models, arch, kgym_policy):
    d, m = models[arch]
    prompt = torch.randint(3, m.config.vocab_size, (1, 6), generator=torch.Generator().manual_seed(15))
    p = kgym(kgym_policy, "generate", "--model", d, "--ids", json.dumps(prompt[0].tolist()),
             "--max-new", 24, "--json")
    assert p.returncode == 0, p.stderr
    ours = json.loads(p.stdout)
    with torch.no_grad():
        ref = m.generate(prompt, max_new_tokens=24, do_sample=False, pad_token_id=0)[0, 6:].tolist()
    assert ours["ids"] == ref
    assert ours["finish_reason"] == ("eos" if len(ref) < 24 else "length")


def test_generate_from_hf_cache_layout(models, kgym_policy, tmp_path):
    """A Hugging Face cache snapshot: every file a symbolic link to a blob. The model loads
    through the links (util/fileio's reader alone refuses them) and decodes as HF does."""
    d, m = models["qwen3"]
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snap.mkdir(parents=True)
    for f in pathlib.Path(d).iterdir():
        shutil.copy(f, blobs / f.name)
        (snap / f.name).symlink_to(blobs / f.name)
    prompt = [5, 9, 14, 3]
    p = kgym(kgym_policy, "generate", "--model", snap, "--ids", json.dumps(prompt), "--max-new", 8,
             "--json")
    assert p.returncode == 0, p.stderr
    with torch.no_grad():
        ref = m.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False,
                         pad_token_id=0)[0, 4:].tolist()
    assert json.loads(p.stdout)["ids"] == ref


def test_generate_stops_on_eos(models, kgym_policy, tmp_path):
    """EOS read from generation_config.json (here not in config.json): the token HF greedily
    produces 5th becomes the EOS; both stop there."""
    d, m = models["qwen2"]
    prompt = [10, 20, 30, 40]
    with torch.no_grad():
        free_run = m.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                              eos_token_id=None, pad_token_id=0)[0, 4:].tolist()
    eos = free_run[4]
    d2 = tmp_path / "eos"
    shutil.copytree(d, d2)
    cfg = json.loads((d2 / "config.json").read_text())
    cfg["eos_token_id"] = None
    (d2 / "config.json").write_text(json.dumps(cfg))
    (d2 / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos, 9999]}))
    p = kgym(kgym_policy, "generate", "--model", d2, "--ids", json.dumps(prompt), "--max-new", 12,
             "--json")
    assert p.returncode == 0, p.stderr
    ours = json.loads(p.stdout)
    assert ours["ids"] == free_run[:free_run.index(eos) + 1]
    assert ours["finish_reason"] == "eos"


def test_sampling_is_seeded(models, kgym_policy):
    d, m = models["llama"]
    args = ["generate", "--model", d, "--ids", "[5, 6, 7]", "--max-new", 16, "--temperature", 1.5,
            "--top-k", 50, "--top-p", 0.95, "--json"]
    runs = [json.loads(kgym(kgym_policy, *args, "--seed", s).stdout)["ids"] for s in (1, 1, 2, 3)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2] or runs[0] != runs[3]
    greedy = json.loads(kgym(kgym_policy, "generate", "--model", d, "--ids", "[5, 6, 7]", "--max-new",
                             16, "--json").stdout)["ids"]
    assert runs[0] != greedy


def test_score_matches_hf(models, kgym_policy):
    d, m = models["qwen3"]
    ids = [4, 100, 200, 17, 300, 9]
    p = kgym(kgym_policy, "score", "--model", d, "--ids", json.dumps(ids))
    assert p.returncode == 0, p.stderr
    ours = json.loads(p.stdout)
    with torch.no_grad():
        logp = torch.log_softmax(m(torch.tensor([ids])).logits[0], -1)
    ref = [logp[i - 1, ids[i]].item() for i in range(1, len(ids))]
    assert ours["ids"] == ids and ours["logprobs"][0] is None
    assert max(abs(a - b) for a, b in zip(ours["logprobs"][1:], ref)) < 1e-4
    assert abs(ours["sum"] - sum(ref)) < 1e-3


@pytest.mark.parametrize("arch", ["qwen2", "llama3"])
def test_inspect(models, arch, kgym_policy):
    d, m = models[arch]
    p = kgym(kgym_policy, "inspect", d, "--json")
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["n_params"] == sum(t.numel() for t in m.parameters())  # tied counted once
    assert info["check"]["ok"] is True
    assert info["dtypes"] == {"F32": len(info["tensors"])}
    assert info["config"]["arch"] == m.config.model_type
    assert info["config"]["tied_embeddings"] == m.config.tie_word_embeddings
    text = kgym(kgym_policy, "inspect", d)
    assert text.returncode == 0 and "model.norm.weight" in text.stdout and "check: ok" in text.stdout


# ---- chat with the real Qwen3 tokenizer; padded vocabulary rows -------------------------------

@pytest.fixture(scope="module")
def qwen3_big_vocab(qwen3_tokenizer_dir, tmp_path_factory):
    """A tiny Qwen3 with Qwen3's real embedding size (151936 rows, past the tokenizer's 151669):
    the padding rows of its LM head are made large, so HF's unmasked greedy picks them."""
    tok = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir)
    cfg = Qwen3Config(**_common(vocab_size=151936, intermediate_size=96, num_key_value_heads=2,
                                head_dim=16, num_hidden_layers=1, tie_word_embeddings=False,
                                eos_token_id=tok.convert_tokens_to_ids("<|im_end|>")))
    m = build_hf(cfg, seed=16)
    n_tok = len(tok)
    with torch.no_grad():
        m.lm_head.weight[n_tok:] *= 40
    d = tmp_path_factory.mktemp("qwen3big")
    m.save_pretrained(d)
    return d, m, tok, n_tok


def test_generate_never_picks_padding_rows(qwen3_big_vocab, qwen3_tokenizer_dir, kgym_policy):
    d, m, tok, n_tok = qwen3_big_vocab
    prompt = tok("def add(a, b):")["input_ids"]
    with torch.no_grad():
        unmasked = m.generate(torch.tensor([prompt]), max_new_tokens=1, do_sample=False, pad_token_id=0)
        assert unmasked[0, -1] >= n_tok  # without masking, a padding row wins
        ref = m.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=0,
                         suppress_tokens=list(range(n_tok, 151936)))[0, len(prompt):].tolist()
    p = kgym(kgym_policy, "generate", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--prompt",
             "def add(a, b):", "--max-new", 12, "--json")
    assert p.returncode == 0, p.stderr
    ours = json.loads(p.stdout)
    assert ours["prompt_ids"] == prompt
    assert ours["ids"] == ref
    p = kgym(kgym_policy, "generate", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--prompt",
             "x", "--max-new", 30, "--temperature", 5, "--seed", 3, "--json")
    assert all(i < n_tok for i in json.loads(p.stdout)["ids"])


def test_chat_qwen3_matches_hf(qwen3_big_vocab, qwen3_tokenizer_dir, kgym_policy):
    d, m, tok, n_tok = qwen3_big_vocab
    tools = [{"type": "function", "function": {
        "name": "compile", "description": "Compile the kernel",
        "parameters": {"type": "object", "properties": {"flags": {"type": "string"}}}}}]
    messages = [{"role": "system", "content": "You write CUDA kernels."},
                {"role": "user", "content": "Make relu fast."},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "function": {"name": "compile",
                                                                  "arguments": {"flags": "-O3"}}}]},
                {"role": "tool", "content": "ok"},
                {"role": "user", "content": "Now profile it."}]
    prompt = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
    if isinstance(prompt, dict) or hasattr(prompt, "input_ids"):
        prompt = prompt["input_ids"]
    with torch.no_grad():
        ref = m.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False, pad_token_id=0,
                         suppress_tokens=list(range(n_tok, 151936)))[0, len(prompt):].tolist()
    p = kgym(kgym_policy, "chat", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--template", "qwen3",
             "--max-new", 10, "--json", stdin=json.dumps({"messages": messages, "tools": tools}))
    assert p.returncode == 0, p.stderr
    ours = json.loads(p.stdout)
    assert ours["prompt_ids"] == prompt
    assert ours["ids"] == ref
    assert isinstance(ours["tool_calls"], list) and isinstance(ours["tool_call_errors"], list)
    plain = kgym(kgym_policy, "chat", "--model", d, "--tokenizer", qwen3_tokenizer_dir, "--template",
                 "qwen3", "--max-new", 10, stdin=json.dumps(messages))
    assert plain.returncode == 0, plain.stderr


# ---- errors ------------------------------------------------------------------------------------

def _broken(models, tmp_path, how):
    d, m = models["qwen2"]
    bad = tmp_path / how
    shutil.copytree(d, bad)
    st = bad / "model.safetensors"
    if how == "missing-config":
        (bad / "config.json").unlink()
    elif how == "truncated":
        data = st.read_bytes()
        st.write_bytes(data[: len(data) // 2])
    else:
        sd = load_file(st)
        if how == "missing-tensor":
            del sd["model.layers.1.mlp.up_proj.weight"]
        elif how == "wrong-shape":
            sd["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(16, 64)
        elif how == "unexpected-tensor":
            sd["model.layers.0.self_attn.mystery.weight"] = torch.zeros(4)
        elif how == "int-dtype":
            sd["model.norm.weight"] = torch.zeros(64, dtype=torch.int32)
        save_file(sd, st, metadata={"format": "pt"})
    return bad


@pytest.mark.parametrize("how,needle", [
    ("missing-config", "config.json"),
    ("truncated", "model.safetensors"),
    ("missing-tensor", "missing tensor 'model.layers.1.mlp.up_proj.weight'"),
    ("wrong-shape", "'model.layers.0.self_attn.k_proj.weight' has shape [16, 64]"),
    ("unexpected-tensor", "unexpected tensor 'model.layers.0.self_attn.mystery.weight'"),
    ("int-dtype", "'model.norm.weight' has dtype I32"),
])
def test_bad_checkpoints_fail_clearly(models, tmp_path, kgym_policy, how, needle):
    bad = _broken(models, tmp_path, how)
    for cmd in (["generate", "--model", bad, "--ids", "[1, 2]"], ["score", "--model", bad, "--ids", "[1, 2]"]):
        p = kgym(kgym_policy, *cmd)
        assert p.returncode == 1, (cmd, p.returncode, p.stderr)
        assert needle in p.stderr, p.stderr
        assert "kgym-policy" in p.stderr and len(p.stderr.splitlines()) == 1
    p = run_check("logits", bad, write_batch(tmp_path / "b.json", {"ids": torch.tensor([[1, 2]])}),
                  tmp_path / "o.st", ok=False)
    assert p.returncode == 1 and needle in p.stderr
    ins = kgym(kgym_policy, "inspect", bad, "--json")
    if how in ("missing-config", "truncated"):
        assert ins.returncode == (1 if how == "truncated" else 0)
    else:
        assert ins.returncode == 0 and needle in json.loads(ins.stdout)["check"]["problem"]


def test_usage_and_input_errors(models, kgym_policy):
    d, m = models["qwen2"]
    for cmd in ("inspect", "generate", "score", "chat"):
        h = kgym(kgym_policy, cmd, "--help")
        assert h.returncode == 0 and h.stdout.startswith(f"usage: kgym-policy {cmd}")
    assert kgym(kgym_policy, "generate", "--ids", "[1]").returncode == 2  # no --model
    assert kgym(kgym_policy, "generate", "--model", d).returncode == 2  # no prompt
    assert kgym(kgym_policy, "generate", "--model", d, "--ids", "[1]", "--top-p", "2").returncode == 2
    # 0 would mean "no top-p" to the sampler, not "the top token": refused
    assert kgym(kgym_policy, "generate", "--model", d, "--ids", "[1]", "--top-p", "0").returncode == 2
    assert kgym(kgym_policy, "generate", "--model", d, "--ids", "[1]", "--bogus").returncode == 2
    assert kgym(kgym_policy, "chat", "--model", d, "--template", "gpt9").returncode == 2
    p = kgym(kgym_policy, "generate", "--model", d, "--ids", "[1, 99999]")
    assert p.returncode == 1 and "outside the vocabulary" in p.stderr
    p = kgym(kgym_policy, "generate", "--model", d, "--ids", "[1, -3]")
    assert p.returncode == 1 and "--ids" in p.stderr
    p = kgym(kgym_policy, "generate", "--model", d, "--prompt", "hello")
    assert p.returncode == 1 and "tokenizer" in p.stderr
    p = kgym(kgym_policy, "chat", "--model", d, "--template", "qwen3")
    assert p.returncode == 1 and "tokenizer" in p.stderr
    p = kgym(kgym_policy, "inspect", d / "nope")
    assert p.returncode == 1


def test_known_harmless_extras_are_skipped(models, tmp_path):
    """Older checkpoints carry rotary inv_freq buffers, and some tied ones an lm_head.weight too:
    HF ignores both, and so do we (the embedding stays the LM head)."""
    d, m = models["qwen2"]
    extra = tmp_path / "extra"
    shutil.copytree(d, extra)
    sd = load_file(extra / "model.safetensors")
    sd["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    sd["lm_head.weight"] = torch.zeros_like(sd["model.embed_tokens.weight"])
    save_file(sd, extra / "model.safetensors", metadata={"format": "pt"})
    batch = make_batch(m.config.vocab_size, seed=17)
    run_check("logits", extra, write_batch(tmp_path / "b.json", {"ids": batch["ids"]}), tmp_path / "o.st")
    with torch.no_grad():
        ref = m(batch["ids"]).logits
    assert (load_file(tmp_path / "o.st")["logits"] - ref).abs().max().item() < 1e-4
