"""kgym-agent end to end: a real kgym-env (the conftest's `server`, CPU variants) driven by the
agent, whose "model" is fake_openai.FakeOpenAI, a scripted OpenAI-compatible server that records
every request.

The main run (two episodes in parallel) solves kgym/mish_elementwise on the CPU through the tools
(Read, Write, Bash, Compile, Verify, Submit: positive reward), while meeting every kind of
malformed tool call (arguments that are not JSON, an unknown tool, a call without a name, a text
fallback <tool_call> block that is broken beside one that works) and a 429 with Retry-After and a
500 from the endpoint; the other episode (clients/alpha) stops calling tools and is submitted by
the agent. Then kgym-bench scores the run's solutions folder, a --resume run does nothing, and
smaller runs cover --max-turns (on a bare Python without gymnasium), --tool-mode text, an
endpoint that never recovers, and bad command lines.
"""
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fake_openai import FakeOpenAI, fail, reply, text_call, tool_call, DONE_TEXT
from kgym.agent import (NO_TOOL_CALL_NUDGE, parse_text_tool_calls, solution_rel_path)
from kgym.client import KgymClient

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / os.environ.get("KGYM_BUILD", "build") / "kgym-bench"
MISH_SOL = REPO / "dataset" / "solutions" / "cpu" / "mish_elementwise"
MISH_FILES = ["model_new.py", "kernels/mish.cpp", "kernels/mish_binding.cpp"]
MISH = "kgym/mish_elementwise"
ALPHA = "clients/alpha"
BETA = "clients/beta"
API_KEY = "sk-kgym-test-7f3a"
# Makes the final Submit instant: the static scan refuses `import os` before anything is built
# (reward -1), so episodes that are not about the evaluation cost no compile.
FORBIDDEN = "rm -r kernels; printf 'import os\\n' > model_new.py"


def mish_script():
    files = {p: (MISH_SOL / p).read_text() for p in MISH_FILES}
    writes = [tool_call("Write", {"file_path": "/workspace/" + p, "content": c}, f"write_{i}")
              for i, (p, c) in enumerate(files.items())]
    return [
        # turn 0: the endpoint first answers 429 (Retry-After: 1 s), then 500, then a reply with
        # one good call and three malformed ones
        [fail(429, retry_after=1), fail(500),
         reply(tool_calls=[
             tool_call("Read", {"file_path": "/workspace/model.py"}, "read_model"),
             tool_call("Read", call_id="bad_json", raw_arguments='{"file_path": "/workspace/m'),
             tool_call("Frobnicate", {"x": 1}, "unknown_tool"),
             tool_call(None, {"command": "ls"}, "no_name"),
         ])],
        # turn 1: the CPU solution, and the template's CUDA example removed
        reply(tool_calls=writes + [tool_call(
            "Bash", {"command": "rm kernels/axpby.cu kernels/axpby_binding.cpp && ls kernels"},
            "rm_example")]),
        # turn 2: text fallback, a good block (lower-case name) and a broken one
        reply(content="Now I compile.\n" + text_call("compile") +
              '\n<tool_call>\n{"name": "Verify", "arguments": {\n</tool_call>'),
        # turn 3: native again, a call without an id (the agent names it)
        reply(tool_calls=[tool_call("Verify", {})]),
        reply(tool_calls=[tool_call("Submit", {}, "submit")]),
    ]


def alpha_script():
    return [
        reply(content="Let me simplify.", tool_calls=[tool_call("Bash", {"command": FORBIDDEN},
                                                                "simplify")]),
        reply(content="I think I am finished."),  # no tool call: the agent nudges
        reply(content="Really finished."),        # twice in a row: the agent submits
    ]


def agent_cmd(server, fake, out, *extra):
    return [sys.executable, "-m", "kgym.agent", "--server", server, "--base-url", fake.url,
            "--model", "fake-model", "--llm-backoff", "0.05", "--out", str(out), *extra]


def agent_env(pythonpath, **extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath
    env.update(extra)
    return env


def run_agent(cmd, env, timeout=400):
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    p.wall_s = time.monotonic() - t0
    return p


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def summaries(out):
    return {(r["task_id"], r["n"]): r for r in read_jsonl(Path(out) / "summary.jsonl")}


def assert_conversation_valid(messages):
    """Every assistant tool_call is answered, in order, by a tool message with its id."""
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            ids = [tc["id"] for tc in m["tool_calls"]]
            assert all(isinstance(x, str) and x for x in ids), m
            answers = messages[i + 1:i + 1 + len(ids)]
            assert [a.get("role") for a in answers] == ["tool"] * len(ids), (m, answers)
            assert [a.get("tool_call_id") for a in answers] == ids


def ok_requests(fake, key):
    return [r for r in fake.for_key(key) if r["status"] == 200]


# ---- the main run ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def main_run(server, clients_pythonpath, tmp_path_factory):
    fake = FakeOpenAI({MISH: mish_script(), ALPHA: alpha_script()}).start()
    out = tmp_path_factory.mktemp("agent") / "run"
    cmd = agent_cmd(server, fake, out, "--tasks", f"{MISH},{ALPHA}", "--variant", "cpu",
                    "--parallel", "2", "--max-turns", "12", "--api-key-env", "KGYM_TEST_KEY",
                    "--temperature", "0.6", "--max-tokens", "4096")
    p = run_agent(cmd, agent_env(clients_pythonpath, KGYM_TEST_KEY=API_KEY))
    print(f"kgym-agent main run: {p.wall_s:.1f} s")
    yield {"fake": fake, "out": out, "proc": p, "cmd": cmd}
    fake.stop()


def test_main_run_finishes_both_episodes(main_run):
    p = main_run["proc"]
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    progress = [line for line in p.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 2, p.stderr
    assert any(line.startswith("[2/2]") for line in progress)
    # the reward is 1, 2 or 3 by the measured speed-up (CPU timing is noisy): positive
    assert any(re.search(MISH + r" #0 ep_\w+: submitted, reward [123],", line)
               for line in progress), progress
    got = summaries(main_run["out"])
    assert set(got) == {(MISH, 0), (ALPHA, 0)}


def test_full_episode_solves_the_task_with_positive_reward(main_run, server):
    s = summaries(main_run["out"])[(MISH, 0)]
    assert s["status"] == "submitted" and s["submitted_by"] == "model", s
    assert s["terminated"] is True and s["truncated"] is False
    assert s["correct"] is True and s["eval_status"] == "ok", s
    assert isinstance(s["reward"], (int, float)) and s["reward"] > 0, s
    assert s["turns"] == 5 and s["steps"] == 5, s
    assert s["error"] is None
    # the server agrees: its own trajectory of the episode ends with the paid Submit
    with KgymClient(server) as c:
        traj = c.trajectory(s["episode_id"])
    steps = [r for r in traj if r.get("type") == "step"]
    assert len(steps) == 5
    assert steps[-1]["terminated"] is True and steps[-1]["reward"] == s["reward"]
    assert traj[-1]["type"] == "close"  # the agent closed the episode when done


def test_malformed_tool_calls_are_answered_and_recovered_from(main_run):
    fake = main_run["fake"]
    s = summaries(main_run["out"])[(MISH, 0)]
    assert s["malformed_calls"] == 4, s  # bad JSON, unknown tool, no name, broken text block

    # the turn-1 request carries the answers to turn 0: one tool message per call, by id
    t1 = [r for r in ok_requests(fake, MISH) if r["turn"] == 1][0]["body"]["messages"]
    tool_msgs = {m["tool_call_id"]: m["content"] for m in t1 if m["role"] == "tool"}
    assert set(tool_msgs) == {"read_model", "bad_json", "unknown_tool", "no_name"}
    assert "softplus" in tool_msgs["read_model"]  # the real file, read through kgym-env
    assert "not valid JSON" in tool_msgs["bad_json"] and "Read" in tool_msgs["bad_json"]
    assert "no tool named 'Frobnicate'" in tool_msgs["unknown_tool"]
    assert "Submit" in tool_msgs["unknown_tool"]  # it lists the real tools
    assert "no function name" in tool_msgs["no_name"]
    echoed = [m for m in t1 if m["role"] == "assistant"][0]["tool_calls"]
    assert [tc["id"] for tc in echoed] == ["read_model", "bad_json", "unknown_tool", "no_name"]

    # the text fallback (turn 2) is answered in kind: <tool_response> blocks in a user message
    t3 = [r for r in ok_requests(fake, MISH) if r["turn"] == 3][0]["body"]["messages"]
    assert t3[-2]["role"] == "assistant" and "<tool_call>" in t3[-2]["content"]
    assert "tool_calls" not in t3[-2]
    answer = t3[-1]
    assert answer["role"] == "user"
    blocks = answer["content"].split("</tool_response>")
    assert len([b for b in blocks if "<tool_response>" in b]) == 2
    assert "Compiled cuda_extension" in blocks[0], answer["content"]
    assert "not valid JSON" in blocks[1]

    # a native call without an id got one, and its answer carries it
    t4 = [r for r in ok_requests(fake, MISH) if r["turn"] == 4][0]["body"]["messages"]
    verify_call = t4[-2]["tool_calls"][0]
    assert verify_call["id"] == "call_3_0" and verify_call["function"]["name"] == "Verify"
    assert t4[-1]["tool_call_id"] == "call_3_0" and "Correct" in t4[-1]["content"]


def test_endpoint_errors_are_retried_honouring_retry_after(main_run):
    fake = main_run["fake"]
    t0 = [r for r in fake.for_key(MISH) if r["turn"] == 0]
    assert [r["status"] for r in t0] == [429, 500, 200]
    # identical requests each time
    assert t0[0]["body"] == t0[1]["body"] == t0[2]["body"]
    gap_429 = t0[1]["t"] - t0[0]["t"]
    gap_500 = t0[2]["t"] - t0[1]["t"]
    assert gap_429 >= 1.0, f"retried {gap_429:.3f} s after a 429 with Retry-After: 1"
    assert gap_500 < 1.0, f"a 500 without Retry-After waits the backoff (0.05 s), not {gap_500}"
    s = summaries(main_run["out"])[(MISH, 0)]
    assert s["llm_retries"] == 2 and s["llm_requests"] == 7, s
    turn0 = [r for r in read_jsonl(main_run["out"] / s["trajectory"]) if r["type"] == "turn"][0]
    assert [f["status"] for f in turn0["llm_retries"]] == [429, 500]


def test_requests_carry_the_server_tools_and_the_tool_results(main_run, server):
    fake = main_run["fake"]
    with KgymClient(server) as c:
        tools = c.tools("openai")
    assert tools and all(t["type"] == "function" for t in tools)
    reqs = fake.for_key(MISH) + fake.for_key(ALPHA)
    assert len(reqs) >= 8
    for r in reqs:
        body = r["body"]
        assert body["model"] == "fake-model"
        assert body["tools"] == tools  # exactly /v1/tools?format=openai
        assert body["temperature"] == 0.6 and body["max_tokens"] == 4096
        assert r["headers"].get("authorization") == "Bearer " + API_KEY
        assert r["path"] == "/v1/chat/completions"
        assert body["messages"][0]["role"] == "system"
        assert "Submit" in body["messages"][0]["content"]
        assert_conversation_valid(body["messages"])
    # the task statement is the server's observation (with the CPU note): model.py included
    user0 = fake.for_key(MISH)[0]["body"]["messages"][1]
    assert user0["role"] == "user" and user0["content"].startswith(f"Task {MISH}:")
    assert "x * torch.tanh(F.softplus(x))" in user0["content"] and "CPU variant" in user0["content"]
    # tool results are the server's observations: Write's and Bash's
    t2 = [r for r in ok_requests(fake, MISH) if r["turn"] == 2][0]["body"]["messages"]
    results = {m["tool_call_id"]: m["content"] for m in t2 if m["role"] == "tool"}
    assert "/workspace/kernels/mish.cpp" in results["write_1"]
    assert "mish.cpp" in results["rm_example"] and "axpby" not in results["rm_example"]
    assert "[exit code: 0]" in results["rm_example"]
    # the agent probed the endpoint once (GET /models) before the episodes
    assert [o["path"] for o in fake.other_requests] == ["/v1/models"]


def test_trajectory_files_hold_the_whole_conversation(main_run):
    out, fake = main_run["out"], main_run["fake"]
    s = summaries(out)[(MISH, 0)]
    assert s["trajectory"] == "trajectories/kgym_mish_elementwise__0.jsonl"
    lines = read_jsonl(out / s["trajectory"])
    assert lines[0]["type"] == "start" and lines[0]["episode_id"] == s["episode_id"]
    assert lines[-1]["type"] == "summary"
    assert {k: v for k, v in lines[-1].items() if k not in ("type", "ts")} == s
    turns = [r for r in lines if r["type"] == "turn"]
    assert [t["turn"] for t in turns] == [0, 1, 2, 3, 4]
    assert turns[-1]["reward"] == s["reward"] and turns[-1]["terminated"] is True
    assert all(t["reward"] == 0 for t in turns[:-1])
    assert turns[-1]["info"]["reward_components"]["correct"] is True
    # the start messages + every turn's messages = the conversation the endpoint last saw,
    # plus the final assistant turn and its tool answer
    convo = list(lines[0]["messages"])
    for t in turns:
        convo.extend(t["messages"])
    last = ok_requests(fake, MISH)[-1]["body"]["messages"]
    assert convo[:len(last)] == last
    assert len(convo) == len(last) + 2 and convo[-1]["tool_call_id"] == "submit"
    # token usage: the sum of what the endpoint reported in its 200 answers
    usage = [r["response"]["usage"] for r in ok_requests(fake, MISH)]
    assert s["tokens"] == {"prompt": sum(u["prompt_tokens"] for u in usage),
                           "completion": sum(u["completion_tokens"] for u in usage),
                           "total": sum(u["total_tokens"] for u in usage)}
    assert [t["usage"] for t in turns] == usage


def test_model_that_stops_calling_tools_is_submitted(main_run):
    out, fake = main_run["out"], main_run["fake"]
    s = summaries(out)[(ALPHA, 0)]
    assert s["status"] == "model_stopped" and s["submitted_by"] == "model_stopped", s
    assert s["turns"] == 3 and s["steps"] == 2, s  # Bash, then the agent's Submit
    assert s["reward"] == -1 and s["terminated"] is True  # import os: refused by the scan
    reqs = ok_requests(fake, ALPHA)
    assert [r["turn"] for r in reqs] == [0, 1, 2]
    nudge = reqs[2]["body"]["messages"][-1]
    assert nudge == {"role": "user", "content": NO_TOOL_CALL_NUDGE}
    lines = read_jsonl(out / s["trajectory"])
    sub = [r for r in lines if r["type"] == "submit"]
    assert len(sub) == 1 and sub[0]["reason"] == "model_stopped" and sub[0]["reward"] == -1


def test_solutions_folder_is_scored_by_kgym_bench(main_run, server, tmp_path):
    out = main_run["out"]
    sol = out / "solutions"
    mish = sol / MISH
    assert sorted(str(p.relative_to(mish)) for p in mish.rglob("*") if p.is_file()) == \
        sorted(MISH_FILES)
    for f in MISH_FILES:
        assert (mish / f).read_bytes() == (MISH_SOL / f).read_bytes()
    assert (sol / ALPHA / "model_new.py").read_text() == "import os\n"
    assert not (sol / ALPHA / "kernels").exists()
    assert BENCH.is_file(), f"{BENCH} is missing: run make first"
    bench_out = tmp_path / "bench"
    p = subprocess.run([str(BENCH), "run", "--tasks", str(REPO / "dataset" / "tasks"),
                        "--only", MISH, "--variant", "cpu", "--server", server,
                        "--solutions", str(sol), "--out", str(bench_out), "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    res = json.loads((bench_out / "results.json").read_text())
    assert [(t["task_id"], t["status"]) for t in res["tasks"]] == [(MISH, "correct")], res["tasks"]


def test_resume_skips_finished_episodes(main_run, clients_pythonpath):
    fake, out = main_run["fake"], main_run["out"]
    before = len(fake.requests)
    p = run_agent(main_run["cmd"] + ["--resume"],
                  agent_env(clients_pythonpath, KGYM_TEST_KEY=API_KEY))
    assert p.returncode == 0, p.stderr
    assert "2 episodes already done, 0 to run" in p.stderr
    assert len(fake.requests) == before  # no model call at all
    assert len(read_jsonl(out / "summary.jsonl")) == 2
    assert (out / "solutions" / MISH / "model_new.py").is_file()
    # without --resume, the folder is refused rather than overwritten
    p = run_agent(main_run["cmd"], agent_env(clients_pythonpath, KGYM_TEST_KEY=API_KEY))
    assert p.returncode == 1 and "already holds a run" in p.stderr, p.stderr


# ---- smaller runs ------------------------------------------------------------------------------

def test_max_turns_submits_on_a_bare_python(server, clients_pythonpath, tmp_path):
    """--max-turns 2: after two turns the agent submits. Run by /usr/bin/python3, which has no
    gymnasium: the agent needs only the standard library."""
    bare = "/usr/bin/python3"
    assert os.path.isfile(bare), "the bare-Python check needs /usr/bin/python3"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": clients_pythonpath, "PYTHONNOUSERSITE": "1"}
    check = subprocess.run([bare, "-c", "import gymnasium"], env=env, capture_output=True)
    assert check.returncode != 0, "/usr/bin/python3 has gymnasium: not a bare Python"
    with FakeOpenAI({BETA: [
            reply(tool_calls=[tool_call("Bash", {"command": FORBIDDEN}, "a")]),
            reply(tool_calls=[tool_call("Glob", {"pattern": "*.py"}, "b")]),
            reply(tool_calls=[tool_call("Read", {"file_path": "model.py"}, "never")])]}) as fake:
        cmd = agent_cmd(server, fake, tmp_path / "out", "--tasks", BETA, "--variant", "cpu",
                        "--max-turns", "2")
        cmd[0] = bare
        p = run_agent(cmd, env)
        assert p.returncode == 0, p.stderr
        s = summaries(tmp_path / "out")[(BETA, 0)]
        assert s["status"] == "max_turns" and s["submitted_by"] == "max_turns", s
        assert s["turns"] == 2 and s["steps"] == 3 and s["reward"] == -1, s
        assert [r["turn"] for r in fake.requests] == [0, 1]
        glob = [m for m in read_jsonl(tmp_path / "out" / s["trajectory"])
                if m["type"] == "turn"][1]["messages"][1]
        assert glob["tool_call_id"] == "b" and "model_new.py" in glob["content"]


def test_text_tool_mode(server, clients_pythonpath, tmp_path):
    """--tool-mode text: no tools field; the system prompt describes the tools and the
    <tool_call> format, and results come back as <tool_response> blocks."""
    with FakeOpenAI({ALPHA: [
            reply(content="Plan: simplify.\n" + text_call("Bash", {"command": FORBIDDEN})),
            reply(content=text_call("Read", {"file_path": "/workspace/model_new.py"}) +
                  text_call("submit")),
    ]}) as fake:
        p = run_agent(agent_cmd(server, fake, tmp_path / "out", "--tasks", ALPHA, "--variant",
                                "cpu", "--tool-mode", "text"), agent_env(clients_pythonpath))
        assert p.returncode == 0, p.stderr
        s = summaries(tmp_path / "out")[(ALPHA, 0)]
        assert s["status"] == "submitted" and s["submitted_by"] == "model" and s["reward"] == -1
        reqs = fake.requests
        assert len(reqs) == 2 and all("tools" not in r["body"] for r in reqs)
        system = reqs[0]["body"]["messages"][0]["content"]
        assert "<tool_call>" in system and '"name": "Compile"' in system
        answer = reqs[1]["body"]["messages"][-1]
        assert answer["role"] == "user" and answer["content"].startswith("<tool_response>")
        final = read_jsonl(tmp_path / "out" / s["trajectory"])
        last_turn = [r for r in final if r["type"] == "turn"][-1]
        assert "import os" in last_turn["messages"][1]["content"]  # Read ran before Submit
        assert "Reward: -1" in last_turn["messages"][1]["content"]


def test_endpoint_that_never_recovers_errors_the_episode(server, clients_pythonpath, tmp_path):
    with FakeOpenAI({BETA: [[fail(503)]]}) as fake:
        p = run_agent(agent_cmd(server, fake, tmp_path / "out", "--tasks", BETA, "--variant",
                                "cpu", "--llm-retries", "2"), agent_env(clients_pythonpath))
        assert p.returncode == 2, p.stderr
        s = summaries(tmp_path / "out")[(BETA, 0)]
        assert s["status"] == "error" and "HTTP 503" in s["error"], s
        assert s["steps"] == 0 and s["submitted_by"] is None and s["reward"] is None
        assert s["llm_requests"] == 3 and s["llm_retries"] == 2
        assert [r["status"] for r in fake.requests] == [503, 503, 503]
        lines = read_jsonl(tmp_path / "out" / s["trajectory"])
        assert [r["type"] for r in lines] == ["start", "llm_error", "error", "summary"]
        # the episode was closed on the server even so
        with KgymClient(server) as c:
            assert c.episode(s["episode_id"])["status"] == "closed"
        # an errored episode runs again on --resume
        fake.set_script(BETA, [reply(tool_calls=[tool_call("Bash", {"command": FORBIDDEN})]),
                               reply(content=DONE_TEXT), reply(content=DONE_TEXT)])
        p = run_agent(agent_cmd(server, fake, tmp_path / "out", "--tasks", BETA, "--variant",
                                "cpu", "--resume"), agent_env(clients_pythonpath))
        assert p.returncode == 0, p.stderr
        again = summaries(tmp_path / "out")[(BETA, 0)]
        assert again["status"] == "model_stopped" and again["episode_id"] != s["episode_id"]


def _closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_command_line_errors_are_clear(server, clients_pythonpath, tmp_path):
    env = agent_env(clients_pythonpath)
    base = [sys.executable, "-m", "kgym.agent"]
    p = run_agent(base + ["--help"], env)
    assert p.returncode == 0
    for word in ("--base-url", "--max-turns", "--resume", "--episodes-per-task", "solutions/",
                 "exit status"):
        assert word in p.stdout, word
    with FakeOpenAI({}) as fake:
        ok = ["--server", server, "--base-url", fake.url, "--model", "m", "--out",
              str(tmp_path / "o")]
        cases = [
            (["--server", server, "--model", "m"], "--base-url"),
            (ok, "give exactly one of --tasks, --suite, --task-file"),
            (ok + ["--tasks", ALPHA, "--suite", "kgym"], "give exactly one of"),
            (ok + ["--tasks", "no/such/task"], "task 'no/such/task' is not on the server"),
            (ok + ["--suite", "nosuchsuite"], "no tasks of suite 'nosuchsuite'"),
            (ok + ["--tasks", ALPHA, "--parallel", "0"], "--parallel must be > 0"),
            (ok + ["--tasks", ALPHA, "--api-key-env", "KGYM_SURELY_UNSET_VAR"],
             "KGYM_SURELY_UNSET_VAR: that variable is not set"),
            (ok + ["--tasks", ALPHA, "--option", "novalue"], "expected KEY=VALUE"),
            (ok + ["--task-file", str(tmp_path / "missing.txt")], "missing.txt"),
            (["--server", f"http://127.0.0.1:{_closed_port()}", "--base-url", fake.url,
              "--model", "m", "--tasks", ALPHA], "kgym-env server"),
            (["--server", server, "--base-url", f"http://127.0.0.1:{_closed_port()}/v1",
              "--model", "m", "--tasks", ALPHA, "--out", str(tmp_path / "o2")],
             "model endpoint"),
        ]
        for args, want in cases:
            p = run_agent(base + args, env, timeout=60)
            assert p.returncode == 1, (args, p.returncode, p.stderr)
            assert want in p.stderr, (args, p.stderr)
            assert "Traceback" not in p.stderr, p.stderr
        assert fake.requests == []  # no episode ever reached the model
    assert not (tmp_path / "o" / "summary.jsonl").exists()


def test_task_file_and_suite_selection(server, clients_pythonpath, tmp_path):
    """--task-file (plain and JSONL lines) and --suite/--levels select the same ids the server
    lists; --episodes-per-task runs each task N times, in parallel."""
    tf = tmp_path / "tasks.txt"
    tf.write_text(f"# two tasks\n{ALPHA}\n{{\"task_id\": \"{BETA}\"}}\n")
    script = [reply(tool_calls=[tool_call("Bash", {"command": FORBIDDEN}, "x")]),
              reply(content=DONE_TEXT), reply(content=DONE_TEXT)]
    with FakeOpenAI({ALPHA: script, BETA: script}) as fake:
        p = run_agent(agent_cmd(server, fake, tmp_path / "a", "--task-file", str(tf),
                                "--variant", "cpu", "--episodes-per-task", "2", "--parallel", "4",
                                "--seed", "100"), agent_env(clients_pythonpath))
        assert p.returncode == 0, p.stderr
        got = summaries(tmp_path / "a")
        assert set(got) == {(ALPHA, 0), (ALPHA, 1), (BETA, 0), (BETA, 1)}
        assert all(s["status"] == "model_stopped" for s in got.values())
        assert len({s["episode_id"] for s in got.values()}) == 4
        with KgymClient(server) as c:
            seeds = {(s["task_id"], s["n"]): c.episode(s["episode_id"])["seed"]
                     for s in got.values()}
        assert seeds == {(ALPHA, 0): 100, (ALPHA, 1): 101, (BETA, 0): 100, (BETA, 1): 101}
        # one solution per task (the best of its two episodes)
        assert sorted(p.name for p in (tmp_path / "a" / "solutions" / "clients").iterdir()) == \
            ["alpha", "beta"]
        # --suite clients --levels 2: only beta (level 2)
        p = run_agent(agent_cmd(server, fake, tmp_path / "b", "--suite", "clients", "--levels",
                                "2", "--variant", "cpu"), agent_env(clients_pythonpath))
        assert p.returncode == 0, p.stderr
        assert set(summaries(tmp_path / "b")) == {(BETA, 0)}


# ---- pure functions ----------------------------------------------------------------------------

TOOLS = {"read": "Read", "bash": "Bash", "submit": "Submit"}


def test_parse_text_tool_calls():
    calls = parse_text_tool_calls(
        'thinking...\n<tool_call>{"name": "read", "arguments": {"file_path": "a"}}</tool_call>'
        '<tool_call>{"name": "Bash", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>'
        '<tool_call>{"name": "Submit", "parameters": {}}</tool_call>'
        '<tool_call>[1, 2]</tool_call><tool_call>{"name": "Nope"}</tool_call>'
        '<tool_call>{"name": "Read", "arguments": {"file_path": ', TOOLS, 7)
    assert [(c.call_id, c.name, c.args) for c in calls[:3]] == [
        ("text_7_0", "Read", {"file_path": "a"}), ("text_7_1", "Bash", {"command": "ls"}),
        ("text_7_2", "Submit", {})]
    assert all(c.error is None for c in calls[:3])
    assert "JSON object" in calls[3].error
    assert "no tool named 'Nope'" in calls[4].error
    assert "not closed" in calls[5].error and len(calls) == 6
    assert parse_text_tool_calls("no calls here", TOOLS, 0) == []


def test_solution_rel_path():
    assert solution_rel_path("kb/L1/23") == "level1/23"
    assert solution_rel_path("kb/L2/007") == "level2/7"
    assert solution_rel_path("kgym/mish_elementwise") == "kgym/mish_elementwise"
    assert solution_rel_path("ops/12") == "ops/12"
    with pytest.raises(ValueError):
        solution_rel_path("kgym/../etc")


# ---- capacity and interruption -----------------------------------------------------------------

def test_capacity_is_waited_for(launch_server, clients_pythonpath, tmp_path):
    """A server that holds one episode at a time, two episodes in parallel: the second create
    gets 429 CAPACITY_REACHED and is retried (Retry-After) until the first has closed."""
    srv = launch_server(config={"max_episodes": 1}, name="agent_capacity")
    script = [reply(tool_calls=[tool_call("Bash", {"command": FORBIDDEN + "; sleep 1"}, "x")]),
              reply(content=DONE_TEXT), reply(content=DONE_TEXT)]
    with FakeOpenAI({ALPHA: script, BETA: script}) as fake:
        p = run_agent(agent_cmd(srv.url, fake, tmp_path / "out", "--tasks", f"{ALPHA},{BETA}",
                                "--variant", "cpu", "--parallel", "2"),
                      agent_env(clients_pythonpath))
        assert p.returncode == 0, p.stderr
    got = summaries(tmp_path / "out")
    assert sorted(s["status"] for s in got.values()) == ["model_stopped", "model_stopped"]
    refused = [r for r in srv.request_log()
               if r.get("path") == "/v1/episodes" and r.get("status") == 429]
    assert refused, "the second episode was never refused: the test proves nothing"


def test_ctrl_c_stops_and_resume_reruns(server, clients_pythonpath, tmp_path):
    """SIGINT while the agent waits out a Retry-After: exit 3, the episode closed and not
    recorded; --resume runs it again."""
    out = tmp_path / "out"
    with FakeOpenAI({BETA: [[fail(503, retry_after=60)]]}) as fake:
        proc = subprocess.Popen(agent_cmd(server, fake, out, "--tasks", BETA, "--variant", "cpu"),
                                env=agent_env(clients_pythonpath), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not fake.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.requests, "the agent never called the endpoint"
        time.sleep(0.2)
        t0 = time.monotonic()
        proc.send_signal(2)  # SIGINT
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 3, err
        assert time.monotonic() - t0 < 10, "Ctrl-C did not cut the 60 s Retry-After wait"
        assert "interrupted" in err and "--resume" in err, err
        assert not (out / "summary.jsonl").exists() or not read_jsonl(out / "summary.jsonl")
        start = read_jsonl(out / "trajectories" / "clients_beta__0.jsonl")[0]
        with KgymClient(server) as c:
            assert c.episode(start["episode_id"])["status"] == "closed"
        fake.set_script(BETA, [reply(tool_calls=[tool_call("Bash", {"command": FORBIDDEN})]),
                               reply(content=DONE_TEXT), reply(content=DONE_TEXT)])
        p = run_agent(agent_cmd(server, fake, out, "--tasks", BETA, "--variant", "cpu",
                                "--resume"), agent_env(clients_pythonpath))
        assert p.returncode == 0, p.stderr
        assert summaries(out)[(BETA, 0)]["status"] == "model_stopped"
