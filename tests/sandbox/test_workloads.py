"""Ordinary work still runs in the sandbox: the policy must not break what an agent needs.

python3 with torch (the project's environment, shown read-only with --sandbox-python), a C++
build and run with g++, make, git, and nvcc compiling the template's AXPBY kernel for Hopper where
the CUDA toolkit is installed. Control: the same commands on the host succeed too, so a failure
here is the sandbox's.
"""
import shutil
import subprocess
from pathlib import Path

CPP = r'''#include <cstdio>
#include <vector>
#include <thread>
int main() { std::vector<int> v(1000, 2); int s = 0; std::thread t([&]{ for (int x : v) s += x; });
             t.join(); std::printf("sum=%d\n", s); }
'''


def test_python_with_torch_runs_inside(new_episode):
    ep = new_episode()
    out = ep.sh("python3 -c \"import torch; x = torch.arange(6.).reshape(2, 3); "
                "print('torch', (x @ x.T).sum().item(), torch.get_num_threads() >= 1)\"")
    assert out.strip() == "torch 83.0 True", out


def test_cpp_build_make_and_git_run_inside(new_episode):
    assert subprocess.run(["g++", "--version"], capture_output=True).returncode == 0  # control
    ep = new_episode()
    r = ep.put("t.cpp", CPP.encode())
    assert r.status in (200, 201), r
    out = ep.sh("g++ -O2 -pthread t.cpp -o t && ./t && printf 'all:\\n\\techo made\\n' > Makefile "
                "&& make -s && git init -q . && git add t.cpp && "
                "git -c user.name=a -c user.email=a@b commit -qm x && git log --oneline | wc -l")
    assert out.split() == ["sum=2000", "made", "1"], out


def test_nvcc_compiles_the_axpby_example_inside(new_episode):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    ep = new_episode()
    if not Path(nvcc).exists():
        # No CUDA toolkit on this host: the sandbox must say so plainly, not fail oddly.
        obs = ep.bash("nvcc --version")
        assert obs["data"]["exit_code"] == 127
        return
    flags = "-c kernels/axpby.cu -o /tmp/axpby.o -gencode=arch=compute_90a,code=sm_90a"
    out = ep.sh(f"/usr/local/cuda/bin/nvcc {flags} && ls -s /tmp/axpby.o | cut -d' ' -f1")
    assert int(out.strip()) > 0, out
