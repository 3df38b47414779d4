"""README.md's curl walkthrough, run verbatim against a real server.

The walkthrough is the first thing a user types; if it breaks, README lies. The shell block under
"## Drive an episode with curl" is extracted and run with bash against a server of the bundled
tasks (only URL is changed: it points at the test server's port).
"""
import json
import re
import shutil
import subprocess

import pytest

from conftest import REPO


def walkthrough_script():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Drive an episode with curl", 1)[1]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, "README.md has no bash block under 'Drive an episode with curl'"
    return match.group(1)


def test_walkthrough_runs_verbatim(srv):
    for tool in ("curl", "jq", "bash"):
        assert shutil.which(tool), f"{tool} is needed by README's walkthrough (mk/deps.sh installs it)"
    script = walkthrough_script()
    assert "URL=http://127.0.0.1:8080" in script
    script = script.replace("URL=http://127.0.0.1:8080", f"URL=http://127.0.0.1:{srv.port}", 1)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    # Read shows the task's model.py in cat -n form.
    assert "\timport torch" in text or "\t\"\"\"kgym task gemm_bias_gelu" in text
    # Edit reports one replacement; Bash finds the edited line and the example kernel.
    assert '"replacements": 1' in text
    assert "class ModelNew(nn.Module):  # edited" in text and "axpby.cu" in text
    # The two-action turn comes back in order.
    assert '"tools": [\n    "Glob",\n    "Grep"\n  ]' in text
    # The trajectory holds the reset, five steps, and the DELETE closed the episode.
    assert text.count('"type":"step"') == 4
    assert '{"type":"reset","step":null}' in text
    assert '"status": "closed"' in text


def evaluation_script():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Evaluate a solution with curl", 1)[1]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, "README.md has no bash block under 'Evaluate a solution with curl'"
    return match.group(1)


def test_evaluation_walkthrough_runs_verbatim(srv):
    """Compile -> Verify -> Profile -> Submit on a CPU solution of a bundled task: the reward is
    paid (1, 2 or 3: the solution is correct; how fast it is on this machine varies)."""
    script = evaluation_script()
    script = script.replace("URL=http://127.0.0.1:8080", f"URL=http://127.0.0.1:{srv.port}", 1)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True,
                         timeout=900, cwd=REPO)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Compiled cuda_extension" in text, text
    assert "Verify:\nCorrect: 6 checks passed" in text, text
    assert "PyTorch eager:" in text and "torch.compile:" in text, text
    tail = json.loads(text[text.rindex("{\n  \"reward\""):])
    assert tail["terminated"] is True and tail["eval_status"] == "ok", tail
    assert tail["reward"] in (1, 2, 3), tail
    assert tail["figures"]["correct"] is True and tail["figures"]["t_candidate_ms"] > 0
