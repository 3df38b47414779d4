"""The static scan (env/harness/scan.py): what it refuses, with a clean control for each rule so
that a scan refusing everything (or nothing) fails here."""
import os
import shutil
import subprocess
import tempfile
import sys

import pytest
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "env", "harness"))
import scan  # noqa: E402

CLEAN = '''
import torch
import torch.nn as nn
import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.size(0) * 2
        cuda_extension.fused(x.contiguous().view(-1), self.weight, out, n)
        return out.view(x.shape)
'''


def py(body):
    return scan.scan_python(CLEAN.replace("        cuda_extension.fused(x.contiguous().view(-1), self.weight, out, n)\n",
                                          body + "\n"), "model_new.py")


def test_clean_candidate_passes():
    assert scan.scan_python(CLEAN, "model_new.py") == []


@pytest.mark.parametrize("body,word", [
    ("        out = torch.matmul(x, x)", "torch.matmul"),
    ("        out = x @ x", "@"),
    ("        out = x.sum(dim=0)", ".sum"),
    ("        out = self.lin(x)", "self.lin"),
    ("        out = torch.nn.functional.relu(x)", "torch.nn.functional"),
    ("        out = torch.ops.aten.relu(x)", "torch.ops"),
    ("        f = getattr(torch, 'relu')", "getattr"),
    ("        out = x.__class__", "__class__"),
    ("        torch.allclose = None", "monkey-patching"),
    ("        s = torch.cuda.Stream()", "torch.cuda"),
    ("        out = torch.compile(self)(x)", "torch.compile"),
    ("        out = eval('x')", "eval"),
])
def test_forward_compute_is_refused(body, word):
    found = py(body)
    assert found and any(word in v for v in found), found


def init(lines):
    """CLEAN with lines added at the end of __init__."""
    return scan.scan_python(CLEAN.replace("        self.lin = nn.Linear(dim, dim)\n",
                                          "        self.lin = nn.Linear(dim, dim)\n" + lines + "\n"), "model_new.py")


@pytest.mark.parametrize("lines,word", [
    # red team C: the dispatcher's stack through torch's private modules, in __init__
    ("        self.pop = torch._tensor._C._pop_torch_dispatch_stack", "_tensor"),
    ("        pd = torch.hub.sys.modules['torch.utils._python_dispatch']", "hub"),
    ("        self.k = torch.softmax", "torch function"),
    ("        self.t = torch", "module"),
    ("        self.forward = self.lin", "hides the method"),
])
def test_init_bypasses_are_refused(lines, word):
    found = init(lines)
    assert found and any(word in v for v in found), found


def test_init_keeps_allowed_values():
    assert init("        self.dtype = torch.float32\n        self.calls = 0") == []


def test_load_inline_function_named_like_a_tensor_method_is_refused():
    src = ("from torch.utils.cpp_extension import load_inline\n" + CLEAN.replace(
        "        cuda_extension.fused(x.contiguous().view(-1), self.weight, out, n)\n",
        "        out = x.softmax(1)\n        out = ext.fused(x)\n") +
        "ext = load_inline(name='e', cpp_sources='', cuda_sources='', functions=['softmax', 'fused'])\n")
    found = scan.scan_python(src, "model_new.py")
    assert any(".softmax()" in v for v in found), found
    assert not any(".fused()" in v for v in found), found


@pytest.mark.parametrize("line", ["import os", "import sys", "import gc", "import ctypes", "import threading",
                                  "import torch.nn.functional as F", "from torch import relu", "import triton",
                                  "from torch.utils.cpp_extension import load", "import model",
                                  "import importlib"])
def test_imports_are_refused(line):
    found = scan.scan_python(line + "\n" + CLEAN, "model_new.py")
    assert any("not allowed" in v for v in found), found


def test_subclassing_reference_or_tensor_is_refused():
    assert scan.scan_python(CLEAN.replace("class ModelNew(nn.Module)", "class ModelNew(Model)"), "m.py")
    assert scan.scan_python(CLEAN + "\nclass Lazy(torch.Tensor):\n    pass\n", "m.py")


def test_missing_model_new_and_syntax_error():
    assert any("ModelNew" in v for v in scan.scan_python("import torch\n", "m.py"))
    assert any("syntax" in v for v in scan.scan_python("def (:\n", "m.py"))


CPP_CLEAN = '''
#include <torch/types.h>
#include "../binding_registry.h"
// torch::matmul in a comment is fine, and so is "torch::matmul" in a string
static torch::Tensor f(const torch::Tensor &a) {
    TORCH_CHECK(a.is_contiguous(), "torch::matmul");
    auto out = torch::empty_like(a);
    std::vector<int64_t> v; v.resize(3); v.push_back(a.size(0));
    run(out.data_ptr<float>(), a.data_ptr<float>(), a.numel());
    return out;
}
'''


def test_cpp_clean_passes():
    assert scan.scan_cpp(CPP_CLEAN, "kernels/f_binding.cpp", scan.tensor_compute_methods()) == []


@pytest.mark.parametrize("line", ["auto y = torch::matmul(a, a);", "auto y = at::relu(a);", "auto y = a.exp();",
                                  "auto y = a.matmul(a);", "auto y = at::native::add(a, a);",
                                  "auto y = a.cpu();", "torch::nn::Linear l(3, 3);"])
def test_cpp_compute_is_refused(line):
    src = CPP_CLEAN.replace("    return out;", "    " + line + "\n    return out;")
    assert scan.scan_cpp(src, "kernels/f.cpp", scan.tensor_compute_methods()), line


@pytest.mark.parametrize("line", ['auto y = py::module_::import("torch").attr("matmul")(a, a);',
                                  'auto y = pybind11::module::import("torch");',
                                  "PyObject *t = PyImport_ImportModule(nullptr);",
                                  'PyRun_SimpleString("import torch");',
                                  "static void g(py::object f) {}",
                                  "static void g(std::function<void()> f) { f(); }",
                                  "#include <pybind11/functional.h>",
                                  'auto r = obj.attr("sum")();',
                                  'PyObject *m = PySys_GetObject("modules");',
                                  'PyObject *f = PyDict_GetItemString(d, "mul");',
                                  "PyObject *d = PyModule_GetDict(m);",
                                  "PyObject *r = Py_TYPE(f)->tp_call(f, args, nullptr);",
                                  "PyObject *t = THPVariable_Wrap(a);",
                                  # red team C: blinding or reading the op record from C++
                                  "c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::Python, true);",
                                  "bool on = c10::impl::TorchDispatchModeTLS::stack_len() > 0;",
                                  "c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKeySet(k));",
                                  "#define CAT(a, b) a##b"])
def test_cpp_calling_python_is_refused(line):
    src = CPP_CLEAN.replace("    return out;", "    " + line + "\n    return out;")
    assert scan.scan_cpp(src, "kernels/f_binding.cpp", scan.tensor_compute_methods()), line


@pytest.fixture
def open_dir():
    """A directory anyone may enter: nm runs as nobody when the tests run as root, and pytest's
    own tmp_path sits below a root-only directory."""
    d = Path(tempfile.mkdtemp(prefix="kgym-scan-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def fake_nm(where, symbols):
    """An nm stand-in printing the given undefined symbols (as `nm -D --undefined-only -C` does)."""
    nm = where / "nm"
    nm.write_text("#!/bin/sh\ncat <<'END'\n" + "\n".join(f"                 U {s}" for s in symbols) + "\nEND\n")
    nm.chmod(0o755)
    return str(nm)


HONEST_IMPORTS = ["at::_ops::empty_like::call(at::Tensor const&, std::optional<c10::ScalarType>)",
                  "at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>)",
                  "at::_ops::view::call(at::Tensor const&, c10::ArrayRef<c10::SymInt>)",
                  "c10::cuda::getCurrentCUDAStream(signed char)", "THPVariable_Wrap(at::TensorBase const&)",
                  "at::cuda::getCurrentCUDABlasHandle()", "cudaLaunchKernel",
                  # what torch's headers bring into an honest GPU module (bundled solutions, nvcc 13)
                  "c10::impl::ExcludeDispatchKeyGuard::ExcludeDispatchKeyGuard(c10::DispatchKeySet)",
                  "c10::impl::GPUTrace::haveState", "c10::impl::GPUTrace::gpuTraceState"]


def test_extension_imports_of_an_honest_module_pass(open_dir):
    assert scan.scan_extension("/dev/null", nm=fake_nm(open_dir, HONEST_IMPORTS)) == []


def test_nm_runs_unprivileged(open_dir):
    """nm parses an ELF file built from the agent's sources: never as root."""
    probe = open_dir / "nm"
    probe.write_text("#!/bin/sh\necho \"                 U uid_$(id -u)\"\n")
    probe.chmod(0o755)
    out = subprocess.run([str(probe)], capture_output=True, text=True, **scan.unprivileged()).stdout
    want = scan.NOBODY if os.geteuid() == 0 else os.geteuid()
    assert f"uid_{want}" in out, out
    assert scan.scan_extension("/dev/null", nm=str(probe)) == []


@pytest.mark.parametrize("symbol,word", [
    ("at::_ops::mul_Tensor::call(at::Tensor const&, at::Tensor const&)", "mul_Tensor"),
    ("at::_ops::mm::call(at::Tensor const&, at::Tensor const&)", "mm"),
    ("at::_ops::slice_scatter::call(at::Tensor const&)", "slice_scatter"),
    ("at::_ops::copy_::call(at::Tensor&, at::Tensor const&, bool)", "copy_"),
    ("at::native::add(at::Tensor const&, at::Tensor const&, c10::Scalar const&)", "at::native::add"),
    ("at::cuda::mul(at::Tensor const&, at::Tensor const&)", "at::cuda::mul"),
    ("c10::Dispatcher::singleton()", "c10::Dispatcher"),
    ("dlsym", "dlsym"),
    ("c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey, bool)", "tls_set_dispatch_key_excluded"),
    ("c10::impl::TorchDispatchModeTLS::stack_len()", "TorchDispatchModeTLS"),
    ("c10::impl::raw_local_dispatch_key_set", "raw_local_dispatch_key_set"),
])
def test_extension_importing_aten_compute_is_refused(open_dir, symbol, word):
    found = scan.scan_extension("/dev/null", nm=fake_nm(open_dir, HONEST_IMPORTS + [symbol]))
    assert found and any(word in v for v in found), found


@pytest.mark.parametrize("body,word", [
    ("        out = torch.Tensor.matmul(x, x)", "torch.Tensor.matmul"),
    ("        def __init__():\n            return torch.relu(x)\n        out = __init__()", "__init__"),
])
def test_review_bypasses_are_refused(body, word):
    found = py(body)
    assert found and any(word in v for v in found), found


def test_constructing_a_helper_module_in_forward_is_refused():
    src = CLEAN + "\n\nclass Helper(nn.Module):\n    def __init__(self, a):\n        super().__init__()\n" \
                  "        self.out = torch.relu(a)\n"
    src = src.replace("        cuda_extension.fused(x.contiguous().view(-1), self.weight, out, n)",
                      "        out = Helper(x).out")
    found = scan.scan_python(src, "model_new.py")
    assert any("constructing Helper" in v for v in found), found


def test_deep_nesting_is_refused_not_a_crash():
    src = CLEAN + "\nX = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
    found = scan.scan_python(src, "model_new.py")
    assert found, "a file too deep to parse must be refused"
