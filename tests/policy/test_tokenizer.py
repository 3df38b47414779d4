"""kgym's tokenizer (policy/tokenizer*.c, `kgym-policy tokenize/detokenize`) against Hugging Face
`tokenizers`: id-exact on the real Qwen3 tokenizer and on byte-level BPE tokenizers trained here
(Llama-3 and GPT-2 pre-tokenizers, NFC, added and special tokens with strip/single-word flags,
both JSON forms of merges, ignore_merges), decoding back to the text, and the errors a user can
hit (bad tokenizer files, invalid UTF-8, ids out of range, usage).

Every text set goes through the CLI in one `--jsonl` call, so the suite pays the tokenizer load
a handful of times, not once per text.
"""
import importlib.util
import json
import pathlib
import random
import subprocess
import time
import unicodedata

import pytest
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, trainers

ROOT = pathlib.Path(__file__).resolve().parents[2]

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

C_CODE = """#include <stdio.h>
int main(int argc, char **argv) {
\tfor (int i = 0; i < argc; ++i) printf("%d: %s\\n", i, argv[i]);
\treturn 0;   // done
}
"""
PY_CODE = """def softmax(x):
    m = max(x)
    e = [math.exp(v - m) for v in x]
    return [v / sum(e) for v in e]  # 'it''s' fine


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 0.5
"""
CUDA_CODE = """__global__ void axpby(const float* __restrict__ x, float* y, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b * y[i];
}
axpby<<<(n + 255) / 256, 256, 0, stream>>>(x, y, 2.0f, 1e-3f, n);\r\n"""

FIXED_TEXTS = [
    "",
    " ",
    "Hello world!",
    "Hello, World! How are you doing today?",
    "I'll say it's done; we've seen they're here, I'm sure he'd go.",
    "IT'S LOUD, WE'LL SHOUT, THEY'RE LATE, I'D SAY, YOU'VE GOT IT'S'S",
    "don't   stop   believing\t\tnow",
    "numbers: 1234567890123456789, 3.14159, 1,000,000 and 42nd 2024-05-01 0x1F",
    "   leading and trailing   ",
    "tabs\tand\t\ttabs\n\nnewlines\r\nCRLF\r\n\r\nend\n",
    "\n\n\n   \n\t\n",
    "a" * 300 + " " + "ab" * 200,
    " " * 50 + "x" + "\n" * 20 + "y",
    "你好，世界。日本語のテキストと한국어 텍스트。",
    "emoji 🙂👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and ❤️",
    "Ελληνικά και Русский текст, ünïcödé façade naïve café",
    "مرحبا بالعالم — שלום עולם (RTL) ١٢٣٤",
    "हिन्दी पाठ और ไทย ภาษา",
    "math: ∑_{i=1}^{n} x_i² ≤ ∞ ≠ √2 ± ½ ⅔ Ⅻ",
    "spaces: a\u00a0b\u2003c\u3000d\u200be\u2028f\u0085g \u180e x\u180e\u180e1 \ufeff\u1680y",
    "x\u180ey \u180e1 \u180e\u180e z\u180e\n'\u180e",  # not White_Space, though PCRE2's \s takes it
    "controls: \x00\x01\x07\x1b[0m\x7f",
    "combining: e\u0301 A\u030a \u1e9b\u0323 n\u0303 Cafe\u0301",
    "precomposed: é Å ñ Café",
    "1234567",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text<|endoftext|><|endoftext|>",
    "<think>\nreasoning\n</think>\n\nanswer",
    '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>',
    "partial <|im_start and <|im_end|x <|<|im_end|>>",
    "special-ish <|begin_of_text|> <|eot_id|> <|start_header_id|>",
    "<mask> a <mask>b c<mask> <mask>   d",
    "hello_sw hello_swx xhello_sw _hello_sw (hello_sw) hello_sw.",
    "Café café Cafe\u0301 cafe\u0301!",
    C_CODE,
    PY_CODE,
    CUDA_CODE,
]

WORDS = ["the", "kernel", "tensor", "warp", "thread", "block", "memory", "shared", "loss",
         "gradient", "token", "model", "fast", "speed", "CUDA", "PyTorch", "reward", "agent",
         "I'm", "don't", "we'll", "It's", "x", "y_i", "Δt", "naïve", "东京", "北京", "数据",
         "😀", "🚀", "αβγ", "42", "3.5", "1e-6", "0xFF", "+=", "->", "::", "{}", "()", "[]",
         "#", "//", "/*", "*/", "'", '"', "\\", "@", "$", "%"]
SEPARATORS = [" ", " ", " ", "  ", "\t", "\n", "\r\n", ", ", ". ", "\n\n", "   ", ""]


def generated_texts(seed, count, words=80):
    """Deterministic mixed texts: words, numbers, punctuation, whitespace runs, unicode."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(5, words)):
            r = rng.random()
            if r < 0.7:
                w = rng.choice(WORDS)
            elif r < 0.8:
                w = str(rng.randint(0, 10 ** rng.randint(1, 15)))
            elif r < 0.9:
                w = rng.choice(WORDS).upper()
            else:
                w = "".join(chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FF),
                                            rng.randint(0x370, 0x52F), rng.randint(0x4E00, 0x4FFF),
                                            rng.randint(0x1F300, 0x1F64F)]))
                            for _ in range(rng.randint(1, 6)))
            parts.append(w)
            parts.append(rng.choice(SEPARATORS))
        texts.append("".join(parts))
    return texts


TEST_TEXTS = FIXED_TEXTS + generated_texts(1, 120)
TRAIN_TEXTS = (FIXED_TEXTS[2:] * 3) + generated_texts(2, 600)


# ---- helpers ---------------------------------------------------------------------------------

def run_cli(kgym_policy, args, stdin=b"", check=True):
    p = subprocess.run([kgym_policy, *args], input=stdin, capture_output=True, timeout=120)
    if check:
        assert p.returncode == 0, f"{args}: exit {p.returncode}: {p.stderr.decode(errors='replace')}"
    return p


def kgym_encode(kgym_policy, tokenizer, texts, special=True):
    """The ids of each text, through one `tokenize --jsonl` call."""
    lines = "".join(json.dumps(t) + "\n" for t in texts).encode()
    args = ["tokenize", "--tokenizer", str(tokenizer), "--jsonl"] + ([] if special else ["--no-special"])
    out = run_cli(kgym_policy, args, lines).stdout.decode().split("\n")
    assert out[-1] == "" and len(out) == len(texts) + 1
    out = out[:-1]
    return [json.loads(line) for line in out]


def kgym_decode(kgym_policy, tokenizer, id_lists, skip_special=False):
    lines = "".join(json.dumps(ids) + "\n" for ids in id_lists).encode()
    args = ["detokenize", "--tokenizer", str(tokenizer), "--jsonl"]
    args += ["--skip-special"] if skip_special else []
    # split on "\n" only: JSON leaves U+2028 and U+0085 unescaped, and splitlines() cuts there
    out = run_cli(kgym_policy, args, lines).stdout.decode().split("\n")
    assert out[-1] == "" and len(out) == len(id_lists) + 1
    out = out[:-1]
    return [json.loads(line) for line in out]


def hf_encode(path, texts, special=True):
    tok = Tokenizer.from_file(str(path))
    tok.encode_special_tokens = not special
    return [tok.encode(t, add_special_tokens=False).ids for t in texts]


def assert_same_ids(texts, ours, theirs, what):
    bad = [i for i in range(len(texts)) if ours[i] != theirs[i]]
    if bad:
        i = bad[0]
        pytest.fail(f"{what}: {len(bad)}/{len(texts)} texts differ; first {texts[i]!r}:\n"
                    f" kgym {ours[i]}\n   hf {theirs[i]}")


# ---- tokenizers trained here -----------------------------------------------------------------

def train_tokenizer(path, pre_tokenizer, normalizer=None, specials=(), added=()):
    """A byte-level BPE of ~2000 ids trained with HF on the generated corpus, saved to path."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    if normalizer is not None:
        tok.normalizer = normalizer
    trainer = trainers.BpeTrainer(vocab_size=2000, min_frequency=2, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(TRAIN_TEXTS, trainer)
    for a in added:
        (tok.add_special_tokens if a.special else tok.add_tokens)([a])
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def llama3_style(tmp_path_factory):
    """Llama-3 split regex + ByteLevel, NFC, specials, a normalized added token (its content
    not in NFC), lstrip/rstrip and single_word tokens."""
    path = tmp_path_factory.mktemp("tok") / "llama3.json"
    return train_tokenizer(
        path,
        pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated"),
                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizer=normalizers.NFC(),
        specials=["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>"],
        added=[AddedToken("<mask>", lstrip=True, rstrip=True, special=True, normalized=False),
               AddedToken("Cafe\u0301", normalized=True, special=False),
               AddedToken("hello_sw", single_word=True, special=False, normalized=False),
               AddedToken("<think>", special=False, normalized=False)])


@pytest.fixture(scope="module")
def gpt2_style(tmp_path_factory):
    """ByteLevel with its own GPT-2 regex, no normalizer, an <|endoftext|> special."""
    path = tmp_path_factory.mktemp("tok") / "gpt2.json"
    return train_tokenizer(path, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                           specials=["<|endoftext|>"])


def rewrite(src, dst, change):
    j = json.loads(src.read_text())
    change(j)
    dst.write_text(json.dumps(j, ensure_ascii=False))
    return dst


def merges_as_strings(j):
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]


def merges_as_pairs(j):
    j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]


# ---- id-exact against HF ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def qwen3_hf(qwen3_tokenizer_dir):
    return Tokenizer.from_file(str(qwen3_tokenizer_dir / "tokenizer.json"))


@pytest.fixture(scope="module")
def qwen3_ids(kgym_policy, qwen3_tokenizer_dir):
    """kgym's ids of TEST_TEXTS on Qwen3, with special tokens recognised (True) and not (False)."""
    return {special: kgym_encode(kgym_policy, qwen3_tokenizer_dir, TEST_TEXTS, special)
            for special in (True, False)}


@pytest.mark.parametrize("special", [True, False], ids=["allow_special", "no_special"])
def test_qwen3_ids_match_hf(qwen3_ids, qwen3_hf, special):
    qwen3_hf.encode_special_tokens = not special
    try:
        theirs = [qwen3_hf.encode(t, add_special_tokens=False).ids for t in TEST_TEXTS]
    finally:
        qwen3_hf.encode_special_tokens = False
    ours = qwen3_ids[special]
    assert_same_ids(TEST_TEXTS, ours, theirs, "qwen3")
    # the texts do exercise what the flag changes, and Qwen splits digits one by one
    im_start = 151644
    assert any(im_start in ids for ids in ours) == special
    assert len(ours[TEST_TEXTS.index("1234567")]) == 7


def test_qwen3_unicode_classes_match_hf(kgym_policy, qwen3_tokenizer_dir, qwen3_hf):
    """Every 29th code point of all Unicode, in contexts that exercise the split regex's classes
    (letters, numbers, whitespace, contractions): PCRE2's Unicode tables against Oniguruma's.
    Left out: the Kaktovik numerals U+1D2C0..1D2D3, new in Unicode 15, which PCRE2 10.42 (Unicode
    14) does not know as \\p{N}."""
    cps = [c for c in range(0, 0x110000, 29)
           if not 0xD800 <= c <= 0xDFFF and not 0x1D2C0 <= c <= 0x1D2D3]
    texts = [f"x{chr(c)}y {chr(c)}1 {chr(c)}{chr(c)} z{chr(c)}\n'{chr(c)}" for c in cps]
    ours = kgym_encode(kgym_policy, qwen3_tokenizer_dir, texts)
    theirs = [e.ids for e in qwen3_hf.encode_batch(texts, add_special_tokens=False)]
    assert_same_ids(texts, ours, theirs, "qwen3 unicode sample")


@pytest.mark.parametrize("form", ["strings", "pairs"])
def test_trained_llama3_style_matches_hf(kgym_policy, llama3_style, tmp_path, form):
    path = rewrite(llama3_style, tmp_path / f"llama3-{form}.json",
                   merges_as_strings if form == "strings" else merges_as_pairs)
    merges = json.loads(path.read_text())["model"]["merges"]
    assert isinstance(merges[0], str if form == "strings" else list)
    for special in (True, False):
        ours = kgym_encode(kgym_policy, path, TEST_TEXTS, special)
        assert_same_ids(TEST_TEXTS, ours, hf_encode(path, TEST_TEXTS, special),
                        f"llama3-style {form} special={special}")


@pytest.mark.parametrize("form", ["strings", "pairs"])
def test_trained_gpt2_style_matches_hf(kgym_policy, gpt2_style, tmp_path, form):
    path = rewrite(gpt2_style, tmp_path / f"gpt2-{form}.json",
                   merges_as_strings if form == "strings" else merges_as_pairs)
    for special in (True, False):
        ours = kgym_encode(kgym_policy, path, TEST_TEXTS, special)
        assert_same_ids(TEST_TEXTS, ours, hf_encode(path, TEST_TEXTS, special),
                        f"gpt2-style {form} special={special}")


def byte_level(s):
    """GPT-2's bytes_to_unicode applied to s (bytes, or a str's UTF-8): a vocabulary string."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return "".join(table[b] for b in (s if isinstance(s, bytes) else s.encode()))


def test_ignore_merges_matches_hf(kgym_policy, llama3_style, tmp_path):
    """Llama 3's ignore_merges: a pre-token that is itself in the vocabulary is one id, even when
    the merges would not build it. Whole words are added to the vocabulary without merges."""
    whole = [" tokenization", " gradient", " kernel", "Hello", " 东京", " PyTorch", " 😀"]

    def add_words(j):
        """New words take the ids after the vocabulary; added tokens move up behind them."""
        vocab = j["model"]["vocab"]
        new = [byte_level(w) for w in whole if byte_level(w) not in vocab]
        assert new, "every word is already a token: pick others"
        for a in j["added_tokens"]:
            if a["id"] >= len(vocab):
                a["id"] += len(new)
        for w in new:
            vocab[w] = len(vocab)

    plain = rewrite(llama3_style, tmp_path / "plain.json", add_words)
    ignoring = rewrite(plain, tmp_path / "ignore.json",
                       lambda j: j["model"].__setitem__("ignore_merges", True))
    texts = TEST_TEXTS + [w + w for w in whole] + [" ".join(whole)]
    ours = kgym_encode(kgym_policy, ignoring, texts)
    assert_same_ids(texts, ours, hf_encode(ignoring, texts), "ignore_merges")
    # the option is exercised: without it, some of these texts tokenize differently
    assert ours != kgym_encode(kgym_policy, plain, texts)


# ---- decoding --------------------------------------------------------------------------------

def test_decode_round_trip_qwen3(kgym_policy, qwen3_tokenizer_dir, qwen3_ids, qwen3_hf):
    """decode(encode(s)) gives s back (its NFC form: Qwen normalises), as HF's decode does."""
    ids = qwen3_ids[True] + qwen3_ids[False]
    back = kgym_decode(kgym_policy, qwen3_tokenizer_dir, ids)
    for text, got, i in zip(TEST_TEXTS + TEST_TEXTS, back, ids):
        assert got == unicodedata.normalize("NFC", text)
        assert got == qwen3_hf.decode(i, skip_special_tokens=False)
    combining = TEST_TEXTS.index("combining: e\u0301 A\u030a \u1e9b\u0323 n\u0303 Cafe\u0301")
    assert back[combining] == "combining: é Å ẛ̣ ñ Café"


def test_decode_round_trip_gpt2_style_is_exact(kgym_policy, gpt2_style):
    """Without a normaliser or stripping tokens, every text comes back byte for byte."""
    ids = kgym_encode(kgym_policy, gpt2_style, TEST_TEXTS)
    assert kgym_decode(kgym_policy, gpt2_style, ids) == TEST_TEXTS


def test_skip_special_matches_hf(kgym_policy, qwen3_tokenizer_dir, qwen3_ids, qwen3_hf):
    ids = qwen3_ids[True]
    ours = kgym_decode(kgym_policy, qwen3_tokenizer_dir, ids, skip_special=True)
    assert ours == [qwen3_hf.decode(i, skip_special_tokens=True) for i in ids]
    chat = TEST_TEXTS.index("<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n")
    assert ours[chat] == "user\nhi there\nassistant\n"
    # <think> is an added token but not a special one: it stays
    assert ours[TEST_TEXTS.index("<think>\nreasoning\n</think>\n\nanswer")].startswith("<think>")


def test_detokenize_writes_raw_bytes(kgym_policy, qwen3_tokenizer_dir, qwen3_hf):
    """A token may end inside a UTF-8 character: the plain output is the bytes, unchanged."""
    ids = qwen3_hf.encode("🙂 x").ids
    first = ids[:1]
    out = run_cli(kgym_policy, ["detokenize", "--tokenizer", str(qwen3_tokenizer_dir),
                                "--ids", json.dumps(first)]).stdout
    assert out and out == "🙂 x".encode()[:len(out)] and len(out) < len("🙂 x".encode())
    whole = run_cli(kgym_policy, ["detokenize", "--tokenizer", str(qwen3_tokenizer_dir)],
                    json.dumps(ids).encode()).stdout
    assert whole == "🙂 x".encode()


# ---- speed -----------------------------------------------------------------------------------

def test_encoding_speed_beside_hf(kgym_policy, qwen3_tokenizer_dir, qwen3_hf, tmp_path):
    """tokens/s of kgym (one thread, loading excluded) beside HF's single-thread encode loop, on
    a part of the benchmark's corpus (tests/bench/bench_tokenizer.py runs the full 1 MB). The
    ids must be equal; the speed is reported, never asserted (timings do not gate CI)."""
    spec = importlib.util.spec_from_file_location("bench_tokenizer",
                                                  ROOT / "tests" / "bench" / "bench_tokenizer.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    docs = bench.corpus(0.3)
    ours, kgym_s = bench.run_kgym(kgym_policy, qwen3_tokenizer_dir, docs, tmp_path)
    t0 = time.perf_counter()
    theirs = [qwen3_hf.encode(d, add_special_tokens=False).ids for d in docs]
    hf_s = time.perf_counter() - t0
    assert ours == theirs
    ntok = sum(map(len, theirs))
    print(f"\nencoding {ntok} tokens: kgym {ntok / kgym_s:,.0f} tokens/s, "
          f"HF single-thread {ntok / hf_s:,.0f} tokens/s ({hf_s / kgym_s:.1f}x)")


# ---- the CLI and its errors ------------------------------------------------------------------

def test_tokenize_text_file_and_stdin_agree(kgym_policy, gpt2_style, tmp_path):
    text = "Hello <|endoftext|> wörld\n\ttabs  "
    f = tmp_path / "t.txt"
    f.write_bytes(text.encode())
    tok = ["tokenize", "--tokenizer", str(gpt2_style)]
    a = json.loads(run_cli(kgym_policy, tok + ["--text", text]).stdout)
    b = json.loads(run_cli(kgym_policy, tok + ["--file", str(f)]).stdout)
    c = json.loads(run_cli(kgym_policy, tok, text.encode()).stdout)
    assert a == b == c == hf_encode(gpt2_style, [text])[0]
    assert json.loads(run_cli(kgym_policy, tok + ["--text", text, "--no-special"]).stdout) == \
        hf_encode(gpt2_style, [text], special=False)[0] != a
    timed = run_cli(kgym_policy, tok + ["--file", str(f), "--time"])
    assert b"tokens/s" in timed.stderr and json.loads(timed.stdout) == a


def test_invalid_utf8_is_rejected(kgym_policy, gpt2_style, tmp_path):
    for bad in (b"abc\xff", b"caf\xc3", b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong"):
        f = tmp_path / "bad.txt"
        f.write_bytes(bad)
        p = run_cli(kgym_policy, ["tokenize", "--tokenizer", str(gpt2_style), "--file", str(f)],
                    check=False)
        assert p.returncode == 1 and b"not valid UTF-8" in p.stderr and p.stdout == b""


def test_detokenize_rejects_bad_ids(kgym_policy, gpt2_style):
    base = ["detokenize", "--tokenizer", str(gpt2_style)]
    for ids, msg in (("[1, 99999999]", b"99999999"), ("[-1]", b"-1"), ('["a"]', b"element 0"),
                     ("{", b"bad JSON"), ("[1.5]", b"element 0")):
        p = run_cli(kgym_policy, base + ["--ids", ids], check=False)
        assert p.returncode == 1 and msg in p.stderr, (ids, p.stderr)


def test_usage_errors_and_help(kgym_policy, gpt2_style):
    for cmd in ("tokenize", "detokenize"):
        h = run_cli(kgym_policy, [cmd, "--help"])
        assert b"usage: kgym-policy " + cmd.encode() in h.stdout and b"--jsonl" in h.stdout
        assert run_cli(kgym_policy, [cmd], check=False).returncode == 2
        p = run_cli(kgym_policy, [cmd, "--tokenizer", str(gpt2_style), "--bogus"], check=False)
        assert p.returncode == 2 and b"--bogus" in p.stderr
        p = run_cli(kgym_policy, [cmd, "--tokenizer"], check=False)
        assert p.returncode == 2 and b"needs a value" in p.stderr
    p = run_cli(kgym_policy, ["tokenize", "--tokenizer", "x", "--text", "a", "--file", "b"], check=False)
    assert p.returncode == 2
    p = run_cli(kgym_policy, ["tokenize", "--tokenizer", str(gpt2_style), "--jsonl"],
                b'"ok"\n42\n', check=False)
    assert p.returncode == 1 and b"line 2" in p.stderr


def small_tokenizer_json():
    """A minimal valid tokenizer.json: the 256 byte symbols, one merge, one special token."""
    vocab = {byte_level(bytes([b])): b for b in range(256)}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 257, "content": "<|end|>", "special": True, "lstrip": False,
                          "rstrip": False, "normalized": False, "single_word": False}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                  "ignore_merges": False, "vocab": {**vocab, "ab": 256}, "merges": [["a", "b"]]},
    }


def set_path(j, path, value):
    *head, last = path
    for k in head:
        j = j[k]
    if isinstance(j, list) and last == len(j):
        j.append(value)
    elif value is KeyError:
        del j[last]
    else:
        j[last] = value


BAD_FILES = [
    ("no model", ["model"], KeyError, '"model" is missing'),
    ("unknown model type", ["model", "type"], "WordPiece", "model.type: 'WordPiece' is not supported"),
    ("merge of unknown tokens", ["model", "merges"], [["a", "zz"]], "model.merges[0]: 'zz' is not in the vocabulary"),
    ("merge result unknown", ["model", "merges"], [["x", "y"]], "merged token 'xy' is not in the vocabulary"),
    ("merge with three parts", ["model", "merges"], ["a b c"], "model.merges[0]: expected"),
    ("merge of wrong type", ["model", "merges"], [7], "model.merges[0]: expected"),
    ("duplicate ids", ["model", "vocab", "zz"], 97, "share id 97"),
    ("added token id not HF's", ["added_tokens", 0, "id"], 300,
     "declared with id 300, but Hugging Face tokenizers gives it 257"),
    ("added token twice", ["added_tokens", 1], {"id": 258, "content": "<|end|>"}, "listed twice"),
    ("id out of range", ["model", "vocab", "zz"], -3, "out of range"),
    ("byte fallback", ["model", "byte_fallback"], True, "model.byte_fallback"),
    ("bpe dropout", ["model", "dropout"], 0.1, "model.dropout"),
    ("unknown normalizer", ["normalizer"], {"type": "Lowercase"}, "normalizer: 'Lowercase' is not supported"),
    ("metaspace", ["pre_tokenizer"], {"type": "Metaspace"}, "pre_tokenizer: 'Metaspace' is not supported"),
    ("prefix space", ["pre_tokenizer", "add_prefix_space"], True, "add_prefix_space"),
    ("split behaviour", ["pre_tokenizer"], {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Removed", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}, "'Removed' is not supported"),
    ("bad regex", ["pre_tokenizer"], {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}, "does not compile"),
    ("no decoder", ["decoder"], None, "decoder: missing"),
    ("wordpiece decoder", ["decoder"], {"type": "WordPiece"}, "decoder: 'WordPiece' is not supported"),
    ("truncation", ["truncation"], {"max_length": 8}, "truncation"),
    ("unk not in vocab", ["model", "unk_token"], "<unk>", "model.unk_token: '<unk>'"),
]


@pytest.mark.parametrize("what,path,value,message", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_tokenizer_files_are_rejected(kgym_policy, tmp_path, what, path, value, message):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(small_tokenizer_json()))
    ok = run_cli(kgym_policy, ["tokenize", "--tokenizer", str(good), "--text", "ab<|end|>"])
    assert json.loads(ok.stdout) == [256, 257]
    j = small_tokenizer_json()
    set_path(j, path, value)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(j))
    p = run_cli(kgym_policy, ["tokenize", "--tokenizer", str(bad), "--text", "x"], check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and message in err and "bad.json" in err, err


@pytest.mark.parametrize("content,message", [
    (b"", "line 1"), (b"{\"model\": ", "line 1"), (b"[1, 2]", "expected a JSON object"),
    (b'{"model": {"type": "BPE"}, "model": {}}', "duplicate object key"),
])
def test_unparsable_files_are_rejected(kgym_policy, tmp_path, content, message):
    bad = tmp_path / "tokenizer.json"
    bad.write_bytes(content)
    p = run_cli(kgym_policy, ["tokenize", "--tokenizer", str(tmp_path), "--text", "x"], check=False)
    assert p.returncode == 1 and message in p.stderr.decode()


def test_added_ids_that_hf_would_renumber_are_rejected(kgym_policy, llama3_style, tmp_path):
    """HF tokenizers ignores the ids written for added tokens and numbers them after the
    vocabulary: a file whose ids disagree would encode differently than it says, so it is
    refused rather than followed."""
    def gap(j):
        for a in j["added_tokens"]:
            if a["id"] >= len(j["model"]["vocab"]):
                a["id"] += 5

    path = rewrite(llama3_style, tmp_path / "gap.json", gap)
    declared = {a["content"]: a["id"] for a in json.loads(path.read_text())["added_tokens"]}
    assert Tokenizer.from_file(str(path)).token_to_id("<mask>") != declared["<mask>"]
    p = run_cli(kgym_policy, ["tokenize", "--tokenizer", str(path), "--text", "x"], check=False)
    assert p.returncode == 1 and b"'<mask>' is declared with id" in p.stderr


def test_missing_file_is_reported(kgym_policy, tmp_path):
    p = run_cli(kgym_policy, ["tokenize", "--tokenizer", str(tmp_path / "nope.json"), "--text", "x"],
                check=False)
    assert p.returncode == 1 and b"nope.json" in p.stderr and b"No such file" in p.stderr
