"""The package without gymnasium (a bare /usr/bin/python3), and `pip install env/clients/python`.

The package promises: standard library only, Python >= 3.9, gymnasium optional. These tests run
it in a separate interpreter (the system's, which has neither gymnasium nor numpy; both are
blocked anyway, in case a machine has them) against the real server, and install it offline into
a throwaway virtualenv.
"""
import ast
import os
import shutil
import subprocess
import textwrap
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "env" / "clients" / "python"
# KGYM_BARE_PYTHON runs the bare-Python tests under another interpreter (e.g. a Python 3.9)
BARE_PYTHON = os.environ.get("KGYM_BARE_PYTHON", "/usr/bin/python3")

BARE_SCRIPT = r'''
import asyncio, importlib.abc, json, sys

class Block(importlib.abc.MetaPathFinder):
    """gymnasium and numpy cannot be imported: the package must not need them."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("gymnasium", "gym", "numpy"):
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, Block())
assert sys.version_info >= (3, 9), sys.version

import kgym
from kgym import KgymClient, KgymEnv, errors
from kgym.aio import AsyncKgymClient, AsyncKgymEnv

url = sys.argv[1]
assert kgym.HAVE_GYMNASIUM is False and kgym.register() is False
assert not any(m.split(".")[0] in ("gymnasium", "numpy") for m in sys.modules)

# the client
with KgymClient(url, retries=2, backoff=0.01) as c:
    assert c.health()["status"] == "ok"
    eid = c.create_episode("clients/alpha", seed=1, options={"variant": "cpu"})["episode_id"]
    r = c.step(eid, {"tool": "Bash", "args": {"command": "echo bare > b.txt"}})
    assert r["observation"]["is_error"] is False
    assert c.read_file(eid, "b.txt") == b"bare\n"
    try:
        c.task("clients/none")
        raise SystemExit("no error for a missing task")
    except errors.NotFound as e:
        assert e.code == "TASK_NOT_FOUND"
    c.close_episode(eid)

# the env, with the stand-in Env and spaces
env = KgymEnv(url, task_id="clients/alpha", variant="cpu")
assert type(env).__mro__[1].__module__ == "kgym.env"  # the stand-in, not gymnasium.Env
obs, info = env.reset(seed=4)
assert "ALPHA_CPU" in obs["content"] and info["seed"] == 4
assert obs in env.observation_space
env.action_space.seed(2)
for _ in range(3):
    a = env.action_space.sample()
    assert a in env.action_space
    obs, reward, terminated, truncated, info = env.step(a)
    assert obs["is_error"] is False and reward == 0.0 and not truncated
obs, *_ = env.step([{"tool": "Read", "args": {"file_path": "model.py", "limit": 1}},
                    {"id": "x", "type": "function",
                     "function": {"name": "Glob", "arguments": "{\"pattern\": \"*.py\"}"}}])
assert len(obs["observations"]) == 2
assert {"tool": "Nope", "args": {}} not in env.action_space
env.close()
with env.__class__(url, task_id="clients/alpha", variant="cpu") as env2:
    env2.reset()

# asyncio: three episodes at once
async def main():
    async with AsyncKgymClient(url) as client:
        async def one(i):
            e = AsyncKgymEnv(url, task_id="clients/alpha", client=client, variant="cpu")
            await e.reset(seed=i)
            obs, *_ = await e.step({"tool": "Bash", "args": {"command": f"echo {i}"}})
            await e.close()
            return obs["content"]
        return await asyncio.gather(*(one(i) for i in range(3)))

out = asyncio.run(main())
assert [o.split("\n")[0] for o in out] == ["0", "1", "2"], out
assert not any(m.split(".")[0] in ("gymnasium", "numpy") for m in sys.modules)
print("BARE OK", sys.version.split()[0])
'''


def bare_env(pythonpath=None):
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
           "LANG": "C.UTF-8"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def test_package_source_is_python39_syntax():
    """No syntax newer than 3.9 (match, except*, ...) in the package."""
    files = sorted((PKG / "kgym").glob("*.py"))
    assert files
    for f in files:
        ast.parse(f.read_text(), filename=str(f), feature_version=(3, 9))


def test_bare_python_without_gymnasium(server, clients_pythonpath, tmp_path):
    assert Path(BARE_PYTHON).is_file(), f"{BARE_PYTHON} is needed (Debian's python3)"
    script = tmp_path / "bare.py"
    script.write_text(BARE_SCRIPT)
    r = subprocess.run([BARE_PYTHON, "-s", str(script), server], cwd=tmp_path,
                       env=bare_env(clients_pythonpath), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "BARE OK" in r.stdout


def test_pip_install_into_a_throwaway_venv(server, tmp_path):
    """`pip install env/clients/python`, offline, into a new virtualenv; then `import kgym`
    there (from the venv, not the source tree) works against the server."""
    # a copy: pip's setuptools build writes build/ and *.egg-info next to the sources
    src = tmp_path / "src"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    # --system-site-packages: setuptools and wheel (Debian's python3-pip brings them) build it
    # without the network
    r = subprocess.run([BARE_PYTHON, "-m", "venv", "--system-site-packages", str(venv)],
                       env=bare_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    py = venv / "bin" / "python"
    env = bare_env()
    env.update({"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                        "--no-index", str(src)], env=env, capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, f"pip install failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    check = textwrap.dedent("""
        import sys, kgym
        print(kgym.__file__)
        print(kgym.__version__)
        print(kgym.KgymClient(sys.argv[1]).health()["status"])
    """)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run([str(py), "-s", "-c", check, server], cwd=elsewhere, env=bare_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    path, version, status = r.stdout.split()
    assert Path(path).resolve().is_relative_to(venv.resolve()), path
    assert version == "0.1.0" and status == "ok"
    # the console script of kgym-agent is installed with the package
    assert (venv / "bin" / "kgym-agent").is_file()
    r = subprocess.run([str(py), "-m", "pip", "show", "kgym"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert "Name: kgym" in r.stdout and "Requires: \n" in r.stdout + "\n"
