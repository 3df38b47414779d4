"""Chat templates and the tool-call parser: `kgym-policy template` (policy/chat_*.c) against HF
`apply_chat_template` on many conversations, text-exact and token-exact, and `kgym-policy
parse-tools` on what the templates render and on malformed calls.

The references: Qwen3's own template (tokenizer_config.json in ../shared), and the Qwen2.5-Instruct
and Llama 3.1-Instruct templates of tests/policy/templates/ (written from memory: see their
headers). Llama 3's special tokens are added to a copy of the Qwen3 tokenizer so that its
rendering can be tokenized too. The id check tokenizes kgym's rendering with kgym's own tokenizer
(`kgym-policy tokenize`) and compares with HF's apply_chat_template(tokenize=True).
"""
import copy
import json
import pathlib
import random
import re
import subprocess

import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

TEMPLATES = pathlib.Path(__file__).resolve().parent / "templates"
KINDS = ("qwen3", "qwen2.5", "llama3")
LLAMA_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                 "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"]
# ---- tools and conversations ---------------------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {
        "name": "run_bash", "description": "Run a command — in the workspace (UTF-8: ü, 日本, 🚀)",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "description": "the \"command\"\n\ttab\\slash"},
            "timeout": {"type": "integer", "default": 120000, "minimum": 0},
            "ratio": {"type": "number", "default": 0.5, "enum": [1e-05, 1e16, -0.0, 3.0, 0.1, 1.5e300]},
            "background": {"type": "boolean", "default": False},
            "extra": {"type": ["string", "null"], "default": None}},
            "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "submit", "description": "", "parameters": {"type": "object", "properties": {}}}},
]
ODD_ARGS = {"z": 1, "a": [1, 2.25, True, None, {}, []], "s": "quote \" back \\ nl \n ctl \u0001 del \x7f",
            "u": "Grüße 世界 🚀 \u2028", "big": 2 ** 62, "neg": -7, "f": 123456789.123}


def call(name, args, wrapped=True, call_id=None):
    fn = {"name": name, "arguments": args}
    if not wrapped:
        return fn
    c = {"type": "function", "function": fn}
    if call_id:
        c["id"] = call_id
    return c


SYS = {"role": "system", "content": "You are a careful CUDA engineer."}
USER = {"role": "user", "content": "Write a fast softmax kernel."}

CASES = {
    "user_only": {"messages": [USER]},
    "system_user": {"messages": [SYS, USER]},
    "multi_turn": {"messages": [SYS, USER, {"role": "assistant", "content": "Sure. Which shapes?"},
                                {"role": "user", "content": "4096 x 4096, fp32."},
                                {"role": "assistant", "content": "Here is a kernel."},
                                {"role": "user", "content": "Thanks!"}]},
    "no_system_multi": {"messages": [USER, {"role": "assistant", "content": "OK."},
                                     {"role": "user", "content": "Go on."}]},
    "ends_with_assistant": {"messages": [SYS, USER, {"role": "assistant", "content": "\n\nDone.\n"}]},
    "unicode": {"messages": [
        {"role": "system", "content": "  Réponds en français. 日本語も。 \u3000"},
        {"role": "user", "content": "\u00a0\tcafé ☕ naïve e\u0301 🚀👩‍💻 עברית\n\n"},
        {"role": "assistant", "content": "\u2003D’accord — ça marche ✓\u2028"},
        {"role": "user", "content": "Merci\u205f"}]},
    "empty_content": {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": ""},
                                   {"role": "assistant", "content": ""}, {"role": "user", "content": " "}]},
    "system_not_first": {"messages": [USER, {"role": "assistant", "content": "Yes."},
                                      {"role": "system", "content": "Be terse."},
                                      {"role": "user", "content": "And?"}]},
    "tools_object_args": {"tools": TOOLS, "messages": [SYS, USER, {
        "role": "assistant", "content": "Let me look at the workspace.",
        "tool_calls": [call("run_bash", {"command": "ls -la", "timeout": 5000, "ratio": 0.25})]},
        {"role": "tool", "content": "model.py\nmodel_new.py"},
        {"role": "assistant", "content": "I see the files."}]},
    "tools_no_system": {"tools": TOOLS, "messages": [USER, {
        "role": "assistant", "content": "", "tool_calls": [call("submit", {})]},
        {"role": "tool", "content": "{\"reward\": 3}"}]},
    "tools_string_args": {"tools": TOOLS, "messages": [SYS, USER, {
        "role": "assistant", "content": "Running it.",
        "tool_calls": [call("run_bash", "{\"command\":\"nvcc -O3 k.cu\",  \"timeout\": 1}", call_id="c1")]},
        {"role": "tool", "content": "ok"}, {"role": "user", "content": "Next?"}]},
    "odd_json_args": {"tools": TOOLS, "messages": [USER, {
        "role": "assistant", "content": "x", "tool_calls": [call("run_bash", ODD_ARGS)]},
        {"role": "tool", "content": "done"}]},
    "calls_without_content": {"tools": TOOLS, "messages": [USER, {
        "role": "assistant", "content": None, "tool_calls": [call("run_bash", {"command": "nvidia-smi"})]},
        {"role": "tool", "content": "H200"}]},
    "empty_tools_list": {"tools": [], "messages": [SYS, USER]},
    "tool_result_first_turn": {"messages": [USER, {"role": "assistant", "content": "Checking.",
                                                   "tool_calls": [call("run_bash", {"command": "date"})]},
                                            {"role": "tool", "content": ""},
                                            {"role": "assistant", "content": "No output."}]},
    # several calls in one message: the Qwen templates only (Llama 3.1 takes one per message)
    "several_calls": {"tools": TOOLS, "messages": [SYS, USER, {
        "role": "assistant", "content": "Two things at once.",
        "tool_calls": [call("run_bash", {"command": "make"}), call("run_bash", "{\"command\": \"make test\"}"),
                       call("submit", {})]},
        {"role": "tool", "content": "built"}, {"role": "tool", "content": "passed"}, {"role": "tool", "content": "3"},
        {"role": "assistant", "content": "All done."}]},
    "several_calls_no_content": {"tools": TOOLS, "messages": [USER, {
        "role": "assistant", "content": "", "tool_calls": [call("run_bash", {"command": "a"}),
                                                            call("run_bash", {"command": "b"})]},
        {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}]},
    "flat_tool_calls": {"tools": TOOLS, "messages": [USER, {
        "role": "assistant", "content": "Flat.", "tool_calls": [call("submit", {}, wrapped=False)]},
        {"role": "tool", "content": "ok"}]},
    "consecutive_tool_rounds": {"tools": TOOLS, "messages": [SYS, USER,
        {"role": "assistant", "content": "", "tool_calls": [call("run_bash", {"command": "ls"})]},
        {"role": "tool", "content": "a.cu"},
        {"role": "assistant", "content": "Compiling.", "tool_calls": [call("run_bash", {"command": "nvcc a.cu"})]},
        {"role": "tool", "content": "error: x"},
        {"role": "assistant", "content": "Fixing.", "tool_calls": [call("run_bash", {"command": "nvcc b.cu"})]},
        {"role": "tool", "content": "ok"}]},
    "special_tokens_in_text": {"messages": [{"role": "user", "content": "What is <|im_end|> or <|eot_id|>?"}]},
    # Qwen3's reasoning: reasoning_content before and after the last query, inline <think>, the alias
    "reasoning_fields": {"messages": [USER,
        {"role": "assistant", "content": "First answer.", "reasoning_content": "old thoughts"},
        {"role": "user", "content": "Again."},
        {"role": "assistant", "content": "\nSecond answer.", "reasoning_content": "\n\nnew thoughts\n"}]},
    "reasoning_inline_think": {"messages": [USER,
        {"role": "assistant", "content": "<think>\nhidden\n</think>\n\nVisible."},
        {"role": "user", "content": "Again."},
        {"role": "assistant", "content": "pre<think>\n\na\n</think>\nmid</think>\n\nfinal"}]},
    "reasoning_alias_thinking": {"messages": [USER,
        {"role": "assistant", "content": "Done.", "thinking": "via the thinking key"}]},
    "reasoning_multi_step_tools": {"tools": TOOLS, "messages": [SYS, USER,
        {"role": "assistant", "content": "Let me run it.", "reasoning_content": "need to compile",
         "tool_calls": [call("run_bash", {"command": "make"})]},
        {"role": "user", "content": "<tool_response>\nbuilt\n</tool_response>"},
        {"role": "assistant", "content": "", "reasoning_content": "now test",
         "tool_calls": [call("run_bash", {"command": "make test"})]},
        {"role": "tool", "content": "passed"},
        {"role": "assistant", "content": "It works.", "reasoning_content": ""}]},
    "reasoning_only_wrapped_users": {"messages": [
        {"role": "user", "content": "<tool_response>\nx\n</tool_response>"},
        {"role": "assistant", "content": "A", "reasoning_content": "r1"},
        {"role": "user", "content": "<tool_response>\ny\n</tool_response>"},
        {"role": "assistant", "content": "B", "reasoning_content": "r2"}]},
    "reasoning_empty_not_last": {"messages": [USER,
        {"role": "assistant", "content": "A", "reasoning_content": ""},
        {"role": "assistant", "content": "B"}]},
    # Llama 3's own forms: the ipython role and JSON tool results
    "llama_ipython": {"tools": TOOLS, "messages": [USER,
        {"role": "assistant", "tool_calls": [call("run_bash", {"command": "ls"})]},
        {"role": "ipython", "content": {"files": ["a.cu", "b.cu"], "count": 2}},
        {"role": "tool", "content": [1, "two", None]},
        {"role": "assistant", "content": "  Two files.  "}]},
}

QWEN_ONLY = {"several_calls", "several_calls_no_content", "flat_tool_calls", "tool_result_first_turn"}
LLAMA_ONLY = {"llama_ipython"}
# Qwen3's template reads `content` of an assistant that calls tools; HF fails without it
NOT_QWEN3 = {"calls_without_content"}


def cases_for(kind):
    names = []
    for name in CASES:
        if kind == "llama3" and name in QWEN_ONLY:
            continue
        if kind != "llama3" and name in LLAMA_ONLY:
            continue
        if kind == "qwen3" and name in NOT_QWEN3:
            continue
        names.append(name)
    return names


def options_for(kind):
    """(add_generation_prompt, enable_thinking or None when not passed)."""
    opts = [(True, None), (False, None)]
    if kind == "qwen3":
        opts += [(True, False), (False, False), (True, True)]
    return opts


# ---- the references ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qwen_tok(qwen3_tokenizer_dir):
    return AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir))


@pytest.fixture(scope="module")
def llama_tok_dir(qwen3_tokenizer_dir, tmp_path_factory):
    """The Qwen3 tokenizer plus Llama 3's special tokens as added tokens."""
    d = tmp_path_factory.mktemp("llama3-tokenizer")
    t = Tokenizer.from_file(str(qwen3_tokenizer_dir / "tokenizer.json"))
    t.add_special_tokens(LLAMA_SPECIAL)
    t.save(str(d / "tokenizer.json"))
    return d


@pytest.fixture(scope="module")
def llama_tok(llama_tok_dir):
    return PreTrainedTokenizerFast(tokenizer_file=str(llama_tok_dir / "tokenizer.json"),
                                   bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")


@pytest.fixture(scope="module")
def refs(qwen_tok, llama_tok, qwen3_tokenizer_dir, llama_tok_dir):
    """kind -> (HF tokenizer, chat_template or None for the tokenizer's own, tokenizer dir)."""
    return {
        "qwen3": (qwen_tok, None, qwen3_tokenizer_dir),
        "qwen2.5": (qwen_tok, (TEMPLATES / "qwen2.5.jinja").read_text(), qwen3_tokenizer_dir),
        "llama3": (llama_tok, (TEMPLATES / "llama3.jinja").read_text(), llama_tok_dir),
    }


def hf_render(ref, case, gen, thinking, tokenize=False):
    tok, template, _ = ref
    kwargs = {} if thinking is None else {"enable_thinking": thinking}
    out = tok.apply_chat_template(copy.deepcopy(case["messages"]), tools=case.get("tools"),
                                  chat_template=template, tokenize=tokenize, add_generation_prompt=gen,
                                  **kwargs)
    if tokenize and not isinstance(out, list):
        out = out["input_ids"]
    return out


def kgym_render(kgym_policy, kind, case, gen, thinking):
    args = [kgym_policy, "template", "--template", kind]
    if not gen:
        args.append("--no-generation-prompt")
    if thinking is False:
        args.append("--no-thinking")
    body = {"messages": case["messages"]}
    if "tools" in case:
        body["tools"] = case["tools"]
    p = subprocess.run(args, input=json.dumps(body, ensure_ascii=False).encode(), capture_output=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def kgym_ids(kgym_policy, tok_dir, texts):
    """kgym's tokenizer over many texts in one call (--jsonl: one JSON string per line)."""
    lines = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts)
    p = subprocess.run([kgym_policy, "tokenize", "--tokenizer", str(tok_dir), "--jsonl"],
                       input=lines.encode(), capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    out = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert len(out) == len(texts)
    return out


# ---- rendering -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,name", [(k, n) for k in KINDS for n in cases_for(k)])
def test_render_equals_hf(kgym_policy, refs, kind, name):
    case = CASES[name]
    for gen, thinking in options_for(kind):
        want = hf_render(refs[kind], case, gen, thinking)
        got = kgym_render(kgym_policy, kind, case, gen, thinking)
        assert got == want, f"{kind}/{name} add_generation_prompt={gen} enable_thinking={thinking}"


@pytest.mark.parametrize("kind", KINDS)
def test_rendered_ids_equal_hf(kgym_policy, refs, kind):
    """Token-exact: HF apply_chat_template(tokenize=True) ids == the ids of kgym's rendering."""
    texts, want = [], []
    for name in cases_for(kind):
        for gen, thinking in options_for(kind)[:3]:
            texts.append(kgym_render(kgym_policy, kind, CASES[name], gen, thinking))
            want.append(hf_render(refs[kind], CASES[name], gen, thinking, tokenize=True))
    got = kgym_ids(kgym_policy, refs[kind][2], texts)
    for text, g, w in zip(texts, got, want):
        assert g == w, text
    special = {"qwen3": "<|im_start|>", "qwen2.5": "<|im_start|>", "llama3": "<|start_header_id|>"}[kind]
    special_id = refs[kind][0].convert_tokens_to_ids(special)
    assert all(special_id in w for w in want)  # the special tokens really are single tokens


def test_tojson_numbers_match_python(kgym_policy, refs):
    """Floats as Python's repr (shortest round trip, exponent rules), integers, escapes: thousands
    of random values through the tools block, against HF's tojson (json.dumps)."""
    rng = random.Random(1234)
    floats = [rng.uniform(-1, 1) * 10.0 ** rng.randint(-320, 308) for _ in range(1500)]
    floats += [float(rng.randint(-10**17, 10**17)) for _ in range(200)]
    floats += [5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1e15, 1e16, 9999999999999998.0,
               0.0001, 0.00001, 0.1 + 0.2, 1 / 3, 100.0, -0.0, 0.0]
    ints = [rng.randint(-2**63, 2**63 - 1) for _ in range(200)] + [0, -1, 2**63 - 1, -2**63]
    chars = "".join(chr(c) for c in range(1, 0x80)) + "\u00e9\u2028\u2029\ufeff\U0001f680"
    tool = {"type": "function", "function": {"name": "n", "parameters": {"floats": floats, "ints": ints,
                                                                         "s": chars, chars: [{}, []]}}}
    case = {"tools": [tool], "messages": [USER]}
    for kind in KINDS:
        assert kgym_render(kgym_policy, kind, case, True, None) == hf_render(refs[kind], case, True, None), kind


def test_qwen3_template_is_the_shared_one(qwen_tok, qwen3_tokenizer_dir):
    """The Qwen3 reference really is the template of ../shared's tokenizer_config.json."""
    cfg = json.loads((qwen3_tokenizer_dir / "tokenizer_config.json").read_text())
    assert qwen_tok.chat_template == cfg["chat_template"]


# ---- errors --------------------------------------------------------------------------------------

def run_template(kgym_policy, kind, body, *extra):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return subprocess.run([kgym_policy, "template", "--template", kind, *extra], input=data,
                          capture_output=True, timeout=30)


@pytest.mark.parametrize("kind,messages,needle", [
    ("qwen3", [USER, {"role": "robot", "content": "x"}], "message 1: unknown role"),
    ("qwen2.5", [USER, {"content": "x"}], "message 1: no \"role\""),
    ("llama3", [USER, {"role": "assistant"}], "message 1 (assistant): no \"content\""),
    ("qwen3", [USER, {"role": "assistant", "content": 5}], "message 1 (assistant): \"content\" is not a string"),
    ("qwen3", [USER, {"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": {}}}]}],
     "message 1: tool_calls[0]: no function name"),
    ("qwen2.5", [USER, {"role": "assistant", "content": "", "tool_calls": [call("f", [1])]}],
     "message 1: tool_calls[0] (f): \"arguments\" is neither an object"),
    ("qwen3", [USER, USER, "hello"], "message 2 is not a JSON object"),
    ("qwen3", [], "the conversation is empty"),
])
def test_malformed_messages_rejected(kgym_policy, kind, messages, needle):
    p = run_template(kgym_policy, kind, {"messages": messages})
    assert p.returncode == 1 and p.stdout == b""
    assert needle in p.stderr.decode()


def test_llama3_errors_where_its_template_raises(kgym_policy, refs):
    """Inputs the Llama 3.1 template itself refuses (raise_exception) are errors in kgym too."""
    two_calls = {"messages": [USER, {"role": "assistant", "content": "",
                                     "tool_calls": [call("a", {}), call("b", {})]}]}
    tools_without_user = {"tools": TOOLS, "messages": [SYS]}
    for case, needle in ((two_calls, "exactly one tool call"), (tools_without_user, "first user message")):
        with pytest.raises(Exception):
            hf_render(refs["llama3"], case, True, None)
        p = run_template(kgym_policy, "llama3", case)
        assert p.returncode == 1 and needle in p.stderr.decode(), p.stderr


def test_qwen3_errors_where_hf_fails(kgym_policy, refs):
    case = {"messages": [USER, {"role": "assistant", "tool_calls": [call("f", {})]}]}
    with pytest.raises(Exception):
        hf_render(refs["qwen3"], case, True, None)
    p = run_template(kgym_policy, "qwen3", case)
    assert p.returncode == 1 and "message 1 (assistant): no \"content\"" in p.stderr.decode()


def test_template_cli_usage(kgym_policy, tmp_path):
    p = subprocess.run([kgym_policy, "template", "--help"], capture_output=True)
    assert p.returncode == 0 and b"--no-thinking" in p.stdout
    p = subprocess.run([kgym_policy, "parse-tools", "--help"], capture_output=True)
    assert p.returncode == 0 and b"--template" in p.stdout
    assert run_template(kgym_policy, "mistral", [USER]).returncode == 2
    p = subprocess.run([kgym_policy, "template"], input=b"[]", capture_output=True)
    assert p.returncode == 2 and b"--template" in p.stderr
    p = run_template(kgym_policy, "qwen3", b"{not json")
    assert p.returncode == 1 and b"bad JSON at line 1" in p.stderr
    p = run_template(kgym_policy, "qwen3", [{"role": "user", "content": "a\u0000b"}])
    assert p.returncode == 1 and b"\\u0000 is not allowed" in p.stderr  # a C string cannot carry it
    p = run_template(kgym_policy, "qwen3", {"msgs": []})
    assert p.returncode == 1 and b"\"messages\"" in p.stderr
    missing = tmp_path / "nope.json"
    p = run_template(kgym_policy, "qwen3", [USER], "--tools", str(missing))
    assert p.returncode == 1 and str(missing).encode() in p.stderr
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    p = run_template(kgym_policy, "qwen3", [USER], "--tools", str(tools))
    assert p.returncode == 0 and b"\"name\": \"run_bash\"" in p.stdout
    conv = tmp_path / "conv.json"
    conv.write_text(json.dumps([USER]))
    p = subprocess.run([kgym_policy, "template", "--template", "qwen3", "--file", str(conv)],
                       capture_output=True)
    assert p.returncode == 0 and p.stdout.endswith(b"<|im_start|>assistant\n")


# ---- the tool-call parser ------------------------------------------------------------------------

def parse_tools(kgym_policy, kind, text):
    data = text if isinstance(text, bytes) else text.encode()
    p = subprocess.run([kgym_policy, "parse-tools", "--template", kind], input=data, capture_output=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr.decode()
    return json.loads(p.stdout)


def assistant_turn(refs, kind, message):
    """What the model generates for this assistant message: HF's rendering of its turn."""
    conv = {"messages": [USER, message]}
    text = hf_render(refs[kind], conv, False, None)
    header = "<|start_header_id|>assistant<|end_header_id|>\n\n" if kind == "llama3" else "<|im_start|>assistant\n"
    return text[text.rindex(header) + len(header):]


def expected_call(c):
    fn = c.get("function", c)
    args = fn["arguments"]
    return {"name": fn["name"], "arguments": json.loads(args) if isinstance(args, str) else args}


@pytest.mark.parametrize("kind", KINDS)
def test_parser_reads_back_what_templates_render(kgym_policy, refs, kind):
    checked = 0
    for name in cases_for(kind):
        for m in CASES[name]["messages"]:
            if m["role"] != "assistant" or not m.get("tool_calls"):
                continue
            m = {k: v for k, v in m.items() if k != "reasoning_content"}
            out = parse_tools(kgym_policy, kind, assistant_turn(refs, kind, m))
            assert out["errors"] == [], (name, out)
            assert out["calls"] == [expected_call(c) for c in m["tool_calls"]], name
            if kind != "llama3":  # Qwen3 renders the last turn with an (empty) think block
                content = re.sub(r"^<think>\s*</think>\s*", "", out["content"])
                assert content == (m.get("content") or "").strip(), name
            checked += 1
    assert checked >= (4 if kind == "llama3" else 8)


def test_parser_qwen_cases(kgym_policy):
    text = ("Let me try.<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}</tool_call>\n"
            "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"y\\\": [2]}\"}\n</tool_call>"
            "<tool_call>{\"name\": \"c\"}</tool_call>"
            "<tool_call>{\"arguments\": {}}</tool_call>"
            "<tool_call>{\"name\": \"d\", \"arguments\": [1]}</tool_call>"
            "<tool_call>{\"name\": \"e\", \"arguments\": {oops}</tool_call> tail"
            "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>"
            "<tool_call>{\"name\": \"g\"")
    out = parse_tools(kgym_policy, "qwen3", text)
    assert out["calls"] == [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": [2]}},
                            {"name": "c", "arguments": {}}]
    errs = {e["index"]: e for e in out["errors"]}
    assert sorted(errs) == [3, 4, 5, 6, 7]
    assert "name" in errs[3]["error"] and errs[3]["text"] == "<tool_call>{\"arguments\": {}}</tool_call>"
    assert "not a JSON object" in errs[4]["error"]
    assert "not valid JSON" in errs[5]["error"]
    assert "does not hold a JSON object" in errs[6]["error"]
    assert "unterminated" in errs[7]["error"] and errs[7]["text"] == "<tool_call>{\"name\": \"g\""
    assert out["content"] == "Let me try.\n tail"


def test_parser_llama_cases(kgym_policy):
    out = parse_tools(kgym_policy, "llama3",
                      '<|python_tag|>{"name": "a", "parameters": {"q": "x;y"}}; {"name": "b", "parameters": {}}'
                      '<|eom_id|>')
    assert out == {"calls": [{"name": "a", "arguments": {"q": "x;y"}}, {"name": "b", "arguments": {}}],
                   "errors": [], "content": ""}
    out = parse_tools(kgym_policy, "llama3", ' {"name": "a", "parameters": {"n": 1}} ; {"nam": 1}; {bad')
    assert out["calls"] == [{"name": "a", "arguments": {"n": 1}}]
    assert [e["index"] for e in out["errors"]] == [1, 2] and "name" in out["errors"][0]["error"]
    assert out["errors"][1]["text"] == "{bad"
    out = parse_tools(kgym_policy, "llama3", "Just an answer; no calls.<|eot_id|>")
    assert out == {"calls": [], "errors": [], "content": "Just an answer; no calls."}
    out = parse_tools(kgym_policy, "llama3", "Calling.<|python_tag|>")
    assert out["calls"] == [] and len(out["errors"]) == 1 and out["content"] == "Calling."


def test_parser_survives_any_bytes(kgym_policy):
    junk = (b"\xff\xfe<tool_call>\x00{\"name\": \"\xc3\x28\"}</tool_call>\x80" + b"<tool_call>" * 2000 +
            b"{" * 5000 + b"\x00" * 100)
    for kind in KINDS:
        for data in (junk, b"", b"<|python_tag|>" + junk, b"{" + junk):
            out = parse_tools(kgym_policy, kind, data)
            assert set(out) == {"calls", "errors", "content"}
