"""KgymEnv under gymnasium (pinned in requirements.lock): check_env, the Gym loop, the spaces."""
import gc
import importlib
import json
import re
import warnings
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import kgym
from kgym import errors
from kgym.client import KgymClient
from kgym.env import ENV_ID, KgymEnv
from kgym.spaces import ActionSpace, JsonSpace, validate

REPO = Path(__file__).resolve().parents[2]
TASK = "clients/alpha"
READ = {"tool": "Read", "args": {"file_path": "/workspace/model.py", "limit": 3}}


def active_episodes(url):
    with KgymClient(url) as c:
        return {e["episode_id"] for e in c.episodes(status="active")["episodes"]}


def test_gymnasium_is_pinned():
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (REPO / "requirements.lock").read_text(),
                           re.M))
    assert "gymnasium" in pins, "gymnasium must be pinned in requirements.lock"
    assert gymnasium.__version__ == pins["gymnasium"]
    assert kgym.HAVE_GYMNASIUM is True
    assert issubclass(KgymEnv, gymnasium.Env)
    assert issubclass(JsonSpace, gymnasium.spaces.Space)


def test_check_env_passes(server):
    before = active_episodes(server)
    env = KgymEnv(server, task_id=TASK, variant="cpu")
    # earlier tests' throwaway clients, not yet collected, would warn "unclosed socket" whenever
    # the collector happens to run, here as anywhere: collect them first, so what is recorded
    # below is check_env's (and our env's) alone
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    # the only warning allowed: an env built directly has no spec to test render modes with
    msgs = [str(w.message) for w in caught]
    assert all("not having a spec" in m for m in msgs), msgs
    env.close()
    env.close()  # twice is fine
    assert active_episodes(server) == before  # nothing left open


def test_check_env_registered_env_no_warnings(server):
    assert ENV_ID in gymnasium.registry
    assert gymnasium.registry[ENV_ID].entry_point == "kgym.env:KgymEnv"
    before = active_episodes(server)
    env = gymnasium.make(ENV_ID, url=server, task_id=TASK, variant="cpu")
    assert isinstance(env.unwrapped, KgymEnv) and env.unwrapped.spec.id == ENV_ID
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning of check_env fails the test
        check_env(env.unwrapped)
    obs, info = env.reset(seed=3)  # through gymnasium's wrappers too
    obs, reward, terminated, truncated, info = env.step(READ)
    assert "ALPHA_CPU" in obs["content"] and reward == 0.0
    env.close()
    assert active_episodes(server) == before


def test_registration_is_idempotent():
    assert kgym.register() is True
    importlib.reload(kgym)  # registers again on import: no error, no duplicate warning
    assert kgym.register() is True
    assert list(gymnasium.registry).count(ENV_ID) == 1


def test_gym_loop(server):
    env = KgymEnv(server, task_id=TASK, variant="cpu", render_mode="ansi", tags={"t": 1})
    assert env.episode_id is None
    obs, info = env.reset(seed=11)
    eid = env.episode_id
    assert eid and info["episode_id"] == eid and info["seed"] == 11
    assert info["task_id"] == TASK and "ALPHA_CPU" in obs["content"]
    assert "timing" not in info and "expires_at" not in info
    assert "timing" in env.last_response["info"]
    assert obs in env.observation_space

    # kgym's own form
    obs, reward, terminated, truncated, info = env.step(
        {"tool": "Bash", "args": {"command": "echo gym > g.txt && echo ok"}, "call_id": "b1"})
    assert obs["tool"] == "Bash" and obs["call_id"] == "b1" and "ok" in obs["content"]
    assert "duration_ms" not in obs and "duration_ms" in env.last_response["observation"]
    assert (reward, terminated, truncated) == (0.0, False, False) and info["step"] == 1
    assert isinstance(reward, float)
    # an OpenAI tool_call, verbatim as a model returned it
    obs, *_ = env.step({"id": "call_9", "type": "function",
                        "function": {"name": "Read", "arguments": '{"file_path": "g.txt"}'}})
    assert obs["call_id"] == "call_9" and "gym" in obs["content"]
    # an Anthropic tool_use
    obs, *_ = env.step({"type": "tool_use", "id": "tu_1", "name": "glob",
                        "input": {"pattern": "*.txt"}})
    assert obs["tool"] == "Glob" and "g.txt" in obs["content"]
    # one turn of several calls
    obs, reward, terminated, truncated, info = env.step(
        [READ, {"tool": "NoSuchTool", "args": {}}])
    assert [o["tool"] for o in obs["observations"]] == ["Read", "NoSuchTool"]
    assert obs["observations"][1]["is_error"] is True
    assert obs["observations"][1]["data"]["error_code"] == "UNKNOWN_TOOL"
    assert info["step"] == 4
    text = env.render()
    assert "[Read]" in text and "unknown tool" in text
    steps = [r for r in env.trajectory() if r["type"] == "step"]
    assert len(steps) == 4

    # reset: same episode, fresh workspace
    obs, info = env.reset(seed=12)
    assert env.episode_id == eid and info["seed"] == 12
    obs, *_ = env.step({"tool": "Read", "args": {"file_path": "g.txt"}})
    assert obs["is_error"] and obs["data"]["error_code"] == "FILE_NOT_FOUND"
    env.close()
    with KgymClient(server) as c:
        st = c.episode(eid)
    assert st["status"] == "closed" and st["tags"] == {"t": 1}
    with pytest.raises(RuntimeError):
        env.reset()


def test_raw_info_keeps_timings(server):
    env = KgymEnv(server, task_id=TASK, variant="cpu", raw_info=True)
    obs, info = env.reset()
    assert "timing" in info and "expires_at" in info
    obs, _, _, _, info = env.step(READ)
    assert "duration_ms" in obs and "timing" in info
    env.close()


def test_truncation_null_reward_and_reset(server):
    # a GPU episode on a server without GPUs: the final evaluation at the limit cannot run,
    # its reward is null: 0.0 to gymnasium, flagged so that it is not trained on
    env = KgymEnv(server, task_id=TASK, max_steps=2)
    env.reset()
    _, reward, terminated, truncated, info = env.step(READ)
    assert (terminated, truncated) == (False, False) and "reward_null" not in info
    _, reward, terminated, truncated, info = env.step(READ)
    assert truncated is True and terminated is False
    assert reward == 0.0 and info["reward_null"] is True and info["eval_status"] == "infra_error"
    with pytest.raises(errors.Conflict) as ei:
        env.step(READ)
    assert ei.value.code == "EPISODE_TERMINATED"
    eid = env.episode_id
    env.reset()
    assert env.episode_id == eid
    _, _, _, truncated, info = env.step(READ)
    assert truncated is False and info["step"] == 1
    env.close()


def test_reset_switches_task_and_survives_a_closed_episode(server):
    env = KgymEnv(server, task_id=TASK, variant="cpu")
    obs, _ = env.reset()
    first = env.episode_id
    obs, info = env.reset(options={"task_id": "clients/beta"})
    assert "BETA_CPU" in obs["content"] and info["task_id"] == "clients/beta"
    assert env.episode_id == first and env.task_id == "clients/beta"
    with pytest.raises(errors.BadRequest) as ei:
        env.reset(options={"no_such_option": 1})
    assert ei.value.code == "VALIDATION_ERROR"
    env.options.pop("no_such_option")
    with KgymClient(server) as c:
        c.close_episode(first)  # closed behind the env's back (or reaped, or a restart)
    obs, info = env.reset()
    assert env.episode_id != first and "BETA_CPU" in obs["content"]
    env.close()
    with pytest.raises(ValueError):
        KgymEnv(server, render_mode="human")


def test_step_before_reset_and_bad_seed(server):
    env = KgymEnv(server, task_id=TASK, variant="cpu")
    with pytest.raises(RuntimeError):
        env.step(READ)
    with pytest.raises(ValueError):
        env.reset(seed=-3)
    env.close()


def test_action_space(server):
    env = KgymEnv(server, task_id=TASK, variant="cpu")
    space = env.action_space
    with KgymClient(server) as c:
        tools = c.tools()
    assert space.tools == tools  # ready for an LLM's tool list
    names = [t["function"]["name"] for t in tools]
    assert [alt["properties"]["tool"]["const"] for alt in space.schema["oneOf"]] == names
    good = [
        READ,
        {"tool": "bash", "args": {"command": "ls", "timeout": 1000}},
        {"tool": "Edit", "args": {"file_path": "a", "old_string": "x", "new_string": "y",
                                  "replace_all": True}},
        {"id": "c", "type": "function",
         "function": {"name": "Grep", "arguments": json.dumps({"pattern": "x", "-i": True})}},
        {"type": "tool_use", "id": "u", "name": "Glob", "input": {"pattern": "*"}},
        [READ] * 16,
    ]
    for a in good:
        assert a in space, space.explain(a)
    bad = {
        "unknown tool": {"tool": "Rm", "args": {}},
        "required property": {"tool": "Read", "args": {}},
        "expected integer": {"tool": "Read", "args": {"file_path": "a", "limit": "3"}},
        "minimum": {"tool": "Read", "args": {"file_path": "a", "offset": 0}},
        "additional": {"tool": "Read", "args": {"file_path": "a", "bogus": 1}},
        "1 to 16": [READ] * 17,
        "JSON object": "Read model.py",
        "not JSON": {"id": "c", "type": "function",
                     "function": {"name": "Read", "arguments": "{oops"}},
        "not a JSON value": {"tool": "Read", "args": {"file_path": {1, 2}}},
    }
    for why, a in bad.items():
        assert a not in space
        assert why in space.explain(a), (why, space.explain(a))
    assert [] not in space

    # sampling: seeded, valid, harmless (reads only), accepted by the server
    space.seed(5)
    first = [space.sample() for _ in range(20)]
    space.seed(5)
    assert [space.sample() for _ in range(20)] == first
    assert len({json.dumps(a, sort_keys=True) for a in first}) > 3
    assert all(a in space and a["tool"] in ("Read", "Grep", "Glob") for a in first)
    env.reset()
    for a in first[:5]:
        obs, *_ = env.step(a)
        assert obs["is_error"] is False, obs
    env.close()


def test_json_space():
    s = JsonSpace({"type": "object", "properties": {"n": {"type": "integer", "maximum": 3},
                                                    "tags": {"type": "array",
                                                             "items": {"enum": ["a", "b"]}}},
                   "required": ["n"]})
    assert {"n": 3, "tags": ["a"]} in s
    assert {"n": 4} not in s and {"n": True} not in s and {"tags": []} not in s
    assert {"n": 1, "tags": ["c"]} not in s and {"n": 1.5} not in s
    assert {"n": 1, "x": float("nan")} not in s  # not JSON
    s.seed(1)
    for _ in range(20):
        v = s.sample()
        assert v in s, v
    anything = JsonSpace()
    assert {"a": [1, None, "x", 2.5, {"b": False}]} in anything
    assert (1, 2) not in anything and {1: "x"} not in anything
    assert validate(5, {"anyOf": [{"type": "string"}, {"type": "integer"}]}) is None
    assert validate(5, {"oneOf": [{"type": "number"}, {"type": "integer"}]}) is not None
    assert JsonSpace({"type": "object"}) == JsonSpace({"type": "object"})
    assert isinstance(ActionSpace([]).schema, dict)
    with pytest.raises(ValueError):
        s.sample(mask=1)
