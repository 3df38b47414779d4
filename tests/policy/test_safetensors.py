"""safetensors and config.json as the Python ecosystem writes them, read by the C code.

The fixture writes, into one temp dir: files made by the `safetensors` package (every dtype the
policy reads, bf16/f16 edge values, zero-size and 0-d tensors, metadata), a tiny random Qwen2
saved by transformers `save_pretrained` both sharded (max_shard_size) and as one bf16 file,
config.json files of Qwen2 / Qwen3 / Llama-3 (saved by transformers, minimal ones that lean on
defaults, and published checkpoints' configs), and malformed variants of all of these. Beside
them goes expect.json: per checkpoint each tensor's name, dtype, shape, sha256 and first fp32
values, per config the fields HF itself resolves (through AutoConfig and the model's modules on
the meta device), per bad file the words its error must contain.

The cmocka binary build/tests/test_policy_safetensors (and its ASan+UBSan twin) then checks all
of it with KGYM_ST_PYFILES=<dir>, and writes c_written.safetensors, which the last test reads
back with the `safetensors` package.
"""
import hashlib
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("KGYM_BUILD", "build")
BINARIES = {
    "plain": BUILD / "tests" / "test_policy_safetensors",
    "asan": BUILD / "san" / "tests" / "test_policy_safetensors",
}
FLOAT_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
DTYPE_NAMES = {
    **FLOAT_DTYPES, torch.float64: "F64", torch.int64: "I64", torch.int32: "I32",
    torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}
N_FIRST = 64  # first elements whose fp32 values are compared bit for bit


# ---- expected values -----------------------------------------------------------------------------

def tensor_expect(name, t, shard=None):
    """What the C reader must report for tensor t (as stored, so raw bytes hash the same)."""
    flat = t.contiguous().reshape(-1)
    flat = flat.to(torch.uint8) if t.dtype == torch.bool else flat.view(torch.uint8)
    raw = flat.numpy().tobytes()
    e = {"name": name, "dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
         "sha256": hashlib.sha256(raw).hexdigest()}
    if t.dtype in FLOAT_DTYPES:
        first = t.reshape(-1)[:N_FIRST].to(torch.float32)  # exact: every f16/bf16 fits
        e["f32_bits"] = [int(b) & 0xFFFFFFFF for b in first.view(torch.int32).tolist()]
    if shard:
        e["file"] = shard
    return e


def file_expect(path, shard_name=None):
    with safe_open(str(path), framework="pt") as f:
        return [tensor_expect(k, f.get_tensor(k), shard_name) for k in f.keys()]


def config_expect(cfg_dir):
    """pol_config's fields as transformers resolves them, modules included (on meta: no memory)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(cfg_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    attn = model.model.layers[0].self_attn
    rp = cfg.rope_parameters
    bos = cfg.bos_token_id
    if isinstance(bos, list):
        bos = bos[0] if bos else None
    eos = cfg.eos_token_id
    eos = [] if eos is None else (eos if isinstance(eos, list) else [eos])
    e = {
        "arch": cfg.model_type, "vocab_size": cfg.vocab_size, "hidden": cfg.hidden_size,
        "n_layers": cfg.num_hidden_layers, "n_heads": cfg.num_attention_heads,
        "n_kv_heads": cfg.num_key_value_heads, "head_dim": attn.head_dim,
        "ffn": cfg.intermediate_size, "max_pos": cfg.max_position_embeddings,
        "rms_eps": cfg.rms_norm_eps, "rope_theta": float(rp["rope_theta"]),
        "tie_embeddings": bool(cfg.tie_word_embeddings),
        "attn_bias": attn.q_proj.bias is not None, "qk_norm": hasattr(attn, "q_norm"),
        "bos_id": -1 if bos is None else bos, "eos_ids": eos, "rope_type": rp["rope_type"],
        "torch_dtype": str(cfg.dtype).replace("torch.", "") if cfg.dtype is not None else "",
    }
    assert attn.k_proj.out_features == cfg.num_key_value_heads * attn.head_dim
    if rp["rope_type"] == "llama3":
        e.update(rope_factor=rp["factor"], rope_low_freq=rp["low_freq_factor"],
                 rope_high_freq=rp["high_freq_factor"],
                 rope_orig_max_pos=rp["original_max_position_embeddings"])
    return e


# ---- the files -----------------------------------------------------------------------------------

def edge_tensors():
    g = torch.Generator().manual_seed(7)
    inf, nan = float("inf"), float("nan")
    f16_edges = torch.tensor(
        [0.0, -0.0, 1.0, -2.0, 65504.0, -65504.0, 6.103515625e-05, 5.960464477539063e-08,
         -5.960464477539063e-08, 6.097555160522461e-05, 3.0517578125e-05, 0.333251953125,
         inf, -inf, nan], dtype=torch.float16)
    bf = torch.finfo(torch.bfloat16)
    bf16_edges = torch.tensor(
        [0.0, -0.0, 1.0, -2.0, bf.max, -bf.max, bf.tiny, 9.183549615799121e-41, -1e-40, 3.140625,
         inf, -inf, nan], dtype=torch.bfloat16)
    f32_edges = torch.tensor([0.0, -0.0, 1e-45, -3.4028234663852886e38, 1.17549435e-38, inf, -inf,
                              nan, 0.1], dtype=torch.float32)
    return {
        "edges.f16": f16_edges,
        "edges.bf16": bf16_edges,
        "edges.f32": f32_edges,
        "rand.f16": torch.randn(7, 5, generator=g).to(torch.float16),
        "rand.bf16": torch.randn(3, 4, 5, generator=g).to(torch.bfloat16),
        "rand.f32": torch.randn(11, 13, generator=g),
        "rand.f64": torch.randn(3, generator=g).double(),
        "ints.i64": torch.tensor([-(2**63), -1, 0, 2**63 - 1]),
        "ints.i32": torch.tensor([-(2**31), 7, 2**31 - 1], dtype=torch.int32),
        "ints.i16": torch.tensor([-32768, 5, 32767], dtype=torch.int16),
        "ints.i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "ints.u8": torch.arange(0, 256, 17, dtype=torch.uint8),
        "flags": torch.tensor([True, False, True, True]),
        "empty.f32": torch.zeros(0),
        "empty.bf16": torch.zeros(2, 0, 3, dtype=torch.bfloat16),
        "empty.i64": torch.zeros(0, 4, dtype=torch.int64),
        "scalar.f16": torch.tensor(0.5, dtype=torch.float16),
        "scalar.i32": torch.tensor(-9, dtype=torch.int32),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(4, 4, generator=g),
    }


def rewrite_header(src, dst, edit, extra=b""):
    """Copies a safetensors file with its header JSON changed by edit(dict) (data kept)."""
    raw = pathlib.Path(src).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    edit(hdr)
    text = json.dumps(hdr, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    pathlib.Path(dst).write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:] + extra)
    return hdr


def last_tensor(path):
    raw = pathlib.Path(path).read_bytes()
    hdr = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    hdr.pop("__metadata__", None)
    return max(hdr, key=lambda k: hdr[k]["data_offsets"][1])


def write_bad_files(d, good):
    """Corrupted copies of the Python-written `good`, each with the words its error must hold."""
    raw = good.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    bad = []

    def add(name, data, *contains):
        (d / name).write_bytes(data)
        bad.append({"path": name, "contains": [name, *contains]})

    last = last_tensor(good)
    add("truncated.safetensors", raw[:-3], f"tensor '{last}'", "outside the data area")
    add("cut_in_header.safetensors", raw[: 8 + n // 2], "runs past the end of the file")
    add("len_past_end.safetensors", struct.pack("<Q", len(raw)) + raw[8:], "runs past the end")
    add("len_huge.safetensors", struct.pack("<Q", 1 << 62) + raw[8:], "exceeds the limit")
    add("trailing.safetensors", raw + b"\0" * 5, "5 unaccounted for")
    add("tiny.safetensors", raw[:6], "too short")

    def corrupt(name, edit, *contains):
        rewrite_header(good, d / name, edit)
        bad.append({"path": name, "contains": [name, *contains]})

    def set_field(key, field, value):
        return lambda h: h[key].__setitem__(field, value)

    corrupt("dtype.safetensors", set_field("rand.f32", "dtype", "F31"), "tensor 'rand.f32'",
            "unsupported dtype 'F31'")
    corrupt("shape.safetensors", set_field("rand.f32", "shape", [11, 12]), "tensor 'rand.f32'",
            "elements of F32 need")
    corrupt("neg_shape.safetensors", set_field("ints.i8", "shape", [-3]), "tensor 'ints.i8'",
            "shape[0]")
    corrupt("many_dims.safetensors", set_field("flags", "shape", [1] * 8 + [4]),
            "tensor 'flags'", "9 dims")

    def shift(h):
        b, e = h["ints.i32"]["data_offsets"]
        h["ints.i32"]["data_offsets"] = [b - 2, e - 2]
    corrupt("overlap.safetensors", shift, "tensor 'ints.i32'", "overlap")

    def push_back(h):  # leaves 4 bytes unused before it (and overlaps the next one)
        b, e = h["rand.f32"]["data_offsets"]
        h["rand.f32"]["data_offsets"] = [b + 4, e + 4]
    corrupt("gap.safetensors", push_back, "tensor 'rand.f32'", "gap of 4 bytes")
    corrupt("offsets_beyond.safetensors", set_field("flags", "data_offsets", [0, 1 << 40]),
            "tensor 'flags'", "outside the data area")
    corrupt("meta_int.safetensors", lambda h: h["__metadata__"].__setitem__("format", 1),
            "'__metadata__' value of 'format' is not a string")
    corrupt("extra_field.safetensors", set_field("flags", "strides", [1]), "tensor 'flags'",
            "unexpected field 'strides'")
    # a duplicate key can only be made textually
    text = raw[8:8 + n].decode()
    m = re.search(r'"flags":\{[^}]*\}', text)
    dup = (text[: m.end()] + "," + m.group(0) + text[m.end():]).encode()
    dup += b" " * (-len(dup) % 8)
    add("duplicate.safetensors", struct.pack("<Q", len(dup)) + dup + raw[8 + n:],
        "duplicate tensor name", '"flags"')
    # dtypes the policy does not read, written by the safetensors package itself
    for name, t, tag in [("f8.safetensors", torch.zeros(4, dtype=torch.float8_e4m3fn), "F8_E4M3"),
                         ("u16.safetensors", torch.zeros(4, dtype=torch.uint16), "U16")]:
        save_file({"w": t}, str(d / name))
        bad.append({"path": name, "contains": [name, "tensor 'w'", f"unsupported dtype '{tag}'"]})
    return bad


def write_sharded(d):
    """A tiny random Qwen2 saved by transformers: sharded fp32, and one bf16 file."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                      max_position_embeddings=64)
    model = Qwen2ForCausalLM(cfg).eval()
    sharded = d / "qwen2_sharded"
    model.save_pretrained(sharded, max_shard_size="20KB")
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3, shards
    tensors = []
    for s in shards:
        tensors += file_expect(sharded / s, s)
    assert sorted(t["name"] for t in tensors) == sorted(index["weight_map"])
    assert any(t["name"] == "lm_head.weight" for t in tensors)
    model.to(torch.bfloat16).save_pretrained(d / "qwen2_bf16")
    assert (d / "qwen2_bf16" / "model.safetensors").exists()
    single = file_expect(d / "qwen2_bf16" / "model.safetensors")
    assert all(t["dtype"] == "BF16" for t in single)
    checkpoints = [
        {"path": "qwen2_sharded", "tensors": tensors},
        {"path": "qwen2_sharded/model.safetensors.index.json", "tensors": tensors},
        {"path": f"qwen2_sharded/{shards[1]}",
         "tensors": file_expect(sharded / shards[1], shards[1])},
        {"path": "qwen2_bf16", "tensors": single, "metadata": {"format": "pt"}},
    ]
    return checkpoints, shards, index


def write_bad_shards(d, shards, index):
    bad = []

    def variant(name, edit_index=None, drop=None, shard_edit=None):
        dst = d / name
        shutil.copytree(d / "qwen2_sharded", dst)
        idx = json.loads(json.dumps(index))
        if edit_index:
            edit_index(idx["weight_map"])
        (dst / "model.safetensors.index.json").write_text(json.dumps(idx))
        if drop:
            (dst / drop).unlink()
        if shard_edit:
            shard_edit(dst)
        return dst

    variant("missing_shard", drop=shards[-1])
    bad.append({"path": "missing_shard", "contains": [f"shard '{shards[-1]}' is missing",
                                                       "model.safetensors.index.json"]})
    variant("ghost_tensor", edit_index=lambda w: w.__setitem__("model.ghost.weight", shards[0]))
    bad.append({"path": "ghost_tensor", "contains": ["tensor 'model.ghost.weight'",
                                                      f"'{shards[0]}', which does not hold it"]})
    victim = next(k for k, v in index["weight_map"].items() if v == shards[1])
    variant("unlisted_tensor", edit_index=lambda w: w.pop(victim))
    bad.append({"path": "unlisted_tensor", "contains": [f"tensor '{victim}'",
                                                         "is not in the weight_map"]})
    other = next(k for k, v in index["weight_map"].items() if v == shards[0])

    def add_copy(dst):  # shard 2 also carries a tensor of shard 1
        with safe_open(str(dst / shards[1]), framework="pt") as f:
            ts = {k: f.get_tensor(k) for k in f.keys()}
        ts[other] = torch.zeros(3)
        save_file(ts, str(dst / shards[1]), metadata={"format": "pt"})
    variant("duplicate_across", shard_edit=add_copy)
    bad.append({"path": "duplicate_across", "contains": [f"tensor '{other}' is in two shards",
                                                          shards[0], shards[1]]})
    return bad


PUBLISHED = {  # config.json of released checkpoints, as published
    "qwen2.5-0.5b-instruct": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896,
        "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
        "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14,
        "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": True,
        "use_sliding_window": False, "vocab_size": 151936},
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
        "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
        "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
        "vocab_size": 151936},
    "llama-3.1-8b-instruct": {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
        "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
        "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256},
}

MINIMAL = {  # only what is required: every other field takes HF's default
    "minimal-qwen2": {"model_type": "qwen2", "vocab_size": 100, "hidden_size": 128,
                      "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 64},
    "minimal-qwen3": {"model_type": "qwen3", "vocab_size": 100, "hidden_size": 128,
                      "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 64},
    "minimal-llama": {"model_type": "llama", "vocab_size": 100, "hidden_size": 64,
                      "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4},
}


def write_configs(d):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config
    small = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2)
    saved = {
        "tiny-qwen2": Qwen2Config(**small, rope_theta=1e6, tie_word_embeddings=True,
                                  eos_token_id=[3, 4], dtype="bfloat16"),
        "tiny-qwen3": Qwen3Config(**small, head_dim=32, attention_bias=True, rms_norm_eps=1e-5,
                                  bos_token_id=1, eos_token_id=2, max_position_embeddings=4096),
        "tiny-llama3": LlamaConfig(**small, max_position_embeddings=16384, rope_theta=500000.0,
                                   bos_token_id=250, eos_token_id=[251, 253],
                                   rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 8192}),
    }
    for name, cfg in saved.items():
        cfg.save_pretrained(d / name)
    for name, text in {**PUBLISHED, **MINIMAL}.items():
        (d / name).mkdir()
        (d / name / "config.json").write_text(json.dumps(text, indent=2))
    configs = [{"path": n, "expect": config_expect(d / n)} for n in [*saved, *PUBLISHED, *MINIMAL]]
    # transformers 5 writes rope_parameters: the saved llama3 config must carry it there
    assert json.loads((d / "tiny-llama3" / "config.json").read_text())["rope_parameters"][
        "rope_type"] == "llama3"
    return configs


def write_bad_configs(d):
    base = json.loads((d / "tiny-llama3" / "config.json").read_text())
    cases = {
        "cfg-mistral": (lambda c: c.__setitem__("model_type", "mistral"),
                        ["model_type 'mistral' is not supported"]),
        "cfg-no-vocab": (lambda c: c.pop("vocab_size"), ["missing required field 'vocab_size'"]),
        "cfg-kv3": (lambda c: c.__setitem__("num_key_value_heads", 3),
                    ["num_key_value_heads (3) does not divide num_attention_heads (4)"]),
        "cfg-yarn": (lambda c: c.__setitem__("rope_parameters", {
            "rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}),
            ["rope type 'yarn' is not supported"]),
        "cfg-gelu": (lambda c: c.__setitem__("hidden_act", "gelu"), ["hidden_act"]),
        "cfg-mlp-bias": (lambda c: c.__setitem__("mlp_bias", True), ["mlp_bias"]),
        "cfg-hidden-str": (lambda c: c.__setitem__("hidden_size", "64"),
                           ["field 'hidden_size' is not an integer"]),
    }
    bad = []
    for name, (edit, contains) in cases.items():
        c = json.loads(json.dumps(base))
        edit(c)
        (d / name).mkdir()
        (d / name / "config.json").write_text(json.dumps(c))
        bad.append({"path": name, "contains": [f"{name}/config.json", *contains]})
    (d / "cfg-not-json").mkdir()
    (d / "cfg-not-json" / "config.json").write_text('{"model_type": "llama",')
    bad.append({"path": "cfg-not-json", "contains": ["not valid JSON"]})
    return bad


@pytest.fixture(scope="module")
def pyfiles(tmp_path_factory):
    d = tmp_path_factory.mktemp("st_pyfiles")
    meta = {"format": "pt", "source": "pytest", "unicode": "caf\u00e9 \u2713"}
    save_file(edge_tensors(), str(d / "dtypes.safetensors"), metadata=meta)
    save_file({"only": torch.ones(2, 2)}, str(d / "nometa.safetensors"))
    save_file({}, str(d / "empty.safetensors"))
    checkpoints = [
        {"path": "dtypes.safetensors", "tensors": file_expect(d / "dtypes.safetensors"),
         "metadata": meta, "absent_metadata": ["absent"]},
        {"path": "nometa.safetensors", "tensors": file_expect(d / "nometa.safetensors"),
         "absent_metadata": ["format"]},
    ]
    sharded, shards, index = write_sharded(d)
    checkpoints += sharded
    expect = {
        "checkpoints": checkpoints,
        "bad": write_bad_files(d, d / "dtypes.safetensors") + write_bad_shards(d, shards, index),
        "configs": write_configs(d),
        "bad_configs": write_bad_configs(d),
    }
    expect["checkpoints"].append({"path": "empty.safetensors", "tensors": []})
    (d / "expect.json").write_text(json.dumps(expect, indent=1))
    return d, expect


def run_checker(binary, d, expect):
    assert binary.exists(), f"{binary} is not built: make {binary.relative_to(ROOT)}"
    env = dict(os.environ, KGYM_ST_PYFILES=str(d))
    p = subprocess.run([str(binary)], env=env, capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    n_tensors = sum(len(c["tensors"]) for c in expect["checkpoints"])
    want = (f"pyfiles: {len(expect['checkpoints'])} checkpoints, {n_tensors} tensors, "
            f"{len(expect['bad'])} bad files, {len(expect['configs'])} configs, "
            f"{len(expect['bad_configs'])} bad configs")
    assert want in out, out[-4000:]


def test_python_files_read_identically_in_c(pyfiles):
    d, expect = pyfiles
    assert len(expect["checkpoints"]) >= 7 and len(expect["bad"]) >= 20
    run_checker(BINARIES["plain"], d, expect)


def test_python_files_under_asan_ubsan(pyfiles):
    d, expect = pyfiles
    run_checker(BINARIES["asan"], d, expect)


def test_c_written_file_reads_in_python(pyfiles):
    d, expect = pyfiles
    run_checker(BINARIES["plain"], d, expect)  # (re)writes c_written.safetensors
    with safe_open(str(d / "c_written.safetensors"), framework="pt") as f:
        assert f.metadata() == {"format": "pt", "note": "caf\u00e9"}
        got = {k: f.get_tensor(k) for k in f.keys()}
    assert sorted(got) == ["b.bf16", "bytes", "empty", "flags", "ints", "scalar", "w.f32"]
    assert torch.equal(got["w.f32"], torch.tensor([[1.5, -2.0, 0.0], [3.25, -0.125, 1e30]]))
    bf = got["b.bf16"]
    assert bf.dtype == torch.bfloat16 and bf.shape == (4,)
    assert bf.view(torch.int16).tolist() == [0x3F80, -0x4000, 0x7F80, 0x0001]
    assert got["scalar"].dtype == torch.float16 and got["scalar"].shape == () and got["scalar"] == 1
    assert got["empty"].dtype == torch.int64 and got["empty"].shape == (3, 0)
    assert got["bytes"].tolist() == [0, 1, 2, 254, 255]
    assert got["flags"].dtype == torch.bool and got["flags"].tolist() == [True, False, True]
    assert got["ints"].tolist() == [-1, 2**63 - 1]
    raw = (d / "c_written.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0 and raw[8 + n - 1:8 + n] in (b" ", b"}")
