"""The harness test cases on disk: tasks/, solutions/, exploits/, and how a workspace is made.

A case folder holds the files an agent would write into its workspace (model_new.py, kernels/...,
sometimes extra files such as cuda_extension.py or an edited model.py) plus one metadata file
(solution.json or exploit.json) that is not part of the workspace.
"""
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TASKS = HERE / "tasks"
SOLUTIONS = HERE / "solutions"
EXPLOITS = HERE / "exploits"
TEMPLATE = REPO / "env" / "template"
STUB_KERNEL = HERE / "stub_kernel"  # see kgym_episode.run_case
FIXED_FILES = ("binding.cpp", "binding_registry.h")
META_FILES = ("solution.json", "exploit.json")

TASK_SUITE = "kgym"  # task.json gives no suite, so the server names a folder's task kgym/<folder>


def task_id(task):
    return f"{TASK_SUITE}/{task}"


def cases(root):
    """[(name, meta dict, folder)] for every case folder under root, sorted by name."""
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        for meta_name in META_FILES:
            meta = d / meta_name
            if meta.is_file():
                out.append((d.name, json.loads(meta.read_text()), d))
                break
    return out


def exploits():
    return cases(EXPLOITS)


def solutions():
    return cases(SOLUTIONS)


def case_files(folder):
    """{relative path: bytes} of the workspace files a case ships (metadata excluded)."""
    files = {}
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and path.name not in META_FILES and "__pycache__" not in path.parts:
            files[path.relative_to(folder).as_posix()] = path.read_bytes()
    return files


def make_workspace(dst, task, folder):
    """A workspace as an episode would hold it after the agent wrote the case's files: the
    template's fixed files, the task's model.py, then the case's files (which may overwrite
    model.py: that is the point of the edit-model exploit)."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in FIXED_FILES:
        shutil.copyfile(TEMPLATE / name, dst / name)
    shutil.copyfile(TASKS / task / "model.py", dst / "model.py")
    for rel, data in case_files(folder).items():
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return dst


def python_for_tests():
    """The interpreter that runs the checker: KGYM_HARNESS_PYTHON, else this one (under make test,
    the project venv's, which has torch)."""
    return os.environ.get("KGYM_HARNESS_PYTHON") or sys.executable
