"""kgym static scan: refuses candidates whose sources compute with PyTorch (or reach for the
interpreter's internals) before any of their code runs. Run by the judge, in the trusted
process, over the snapshot the server took (model_new.py and kernels/).

It is the cheap first guard only: the judge also records which aten ops the forward actually
ran, and correctness is always decided on outputs the trusted side computes and compares.

Rules (SKILL.md says the same in the agent's words):
  * model_new.py imports only torch, torch.nn, cuda_extension and a few pure-Python modules;
  * it never touches interpreter internals (dunders other than __init__, eval/exec/getattr/...),
    never assigns to attributes of a module (monkey-patching) and never subclasses torch.Tensor;
  * outside __init__, torch is used only to allocate, to name dtypes and devices, and through
    tensor views and metadata; nn layers are never called; the @ operator is never used;
  * C++/CUDA sources use torch:: / at:: only for allocation, tensor types and metadata, and call
    no tensor compute methods; all computation is in the agent's own kernels.
"""
import ast
import os
import re
import resource
import subprocess

PY_IMPORTS = {"torch", "torch.nn", "cuda_extension", "math", "typing", "__future__", "numbers", "dataclasses"}
TORCH_FROM_IMPORTS = {"nn", "Tensor"}
FORBIDDEN_NAMES = {"eval", "exec", "compile", "__import__", "open", "getattr", "setattr", "delattr", "globals",
                   "locals", "vars", "breakpoint", "input", "memoryview", "exit", "quit", "help"}
TORCH_ALLOWED_IN_FORWARD = {
    "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "empty_strided",
    "float32", "float16", "bfloat16", "float64", "float", "half", "double", "int8", "uint8", "int16", "int32",
    "int64", "int", "long", "bool", "short", "Size", "Tensor", "device", "dtype", "no_grad", "inference_mode",
    "is_tensor", "finfo", "iinfo", "nn",
}
METHODS_ALLOWED = {
    "view", "reshape", "size", "dim", "numel", "stride", "contiguous", "is_contiguous", "data_ptr", "unsqueeze",
    "squeeze", "flatten", "permute", "transpose", "t", "expand", "view_as", "reshape_as", "expand_as", "new_empty",
    "new_zeros", "new_ones", "new_full", "element_size", "is_floating_point", "get_device", "unflatten", "narrow",
    "split", "chunk", "unbind", "movedim", "item", "tolist", "append", "extend", "get", "items", "keys", "values",
    "format", "join", "__init__", "parameters", "named_parameters", "buffers", "register_buffer", "nelement",
    "ndimension", "storage_offset", "zero_", "fill_",
}
BUILTINS_ALLOWED = {"len", "range", "int", "float", "bool", "tuple", "list", "dict", "isinstance", "min", "max",
                    "abs", "enumerate", "zip", "super", "str", "print", "ValueError", "RuntimeError", "TypeError",
                    "AssertionError", "NotImplementedError", "reversed", "sorted", "round", "divmod", "set"}

CPP_NS_ALLOWED = {
    "Tensor", "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "TensorOptions", "ScalarType", "Device", "DeviceType", "IntArrayRef", "Scalar", "Half",
    "BFloat16", "cuda", "Dtype", "dtype", "device", "Layout", "kStrided", "MemoryFormat", "optional", "nullopt",
    "ArrayRef", "TensorList", "OptionalIntArrayRef", "DeviceGuard", "OptionalDeviceGuard", "kCUDA", "kCPU",
    "kFloat", "kFloat32", "kFloat16", "kHalf", "kBFloat16", "kDouble", "kFloat64", "kInt", "kInt32", "kInt64",
    "kLong", "kShort", "kInt16", "kByte", "kUInt8", "kChar", "kInt8", "kBool", "TensorArg", "checkContiguous",
    "checkDim", "checkSize", "checkSameGPU", "checkAllSameGPU", "check_dim", "Generator", "NoGradGuard",
    "InferenceMode", "autograd", "nn",
}
CPP_NS_FORBIDDEN_SUB = {"nn": "torch::nn modules compute", "autograd": "autograd functions compute"}
CPP_METHODS_ALLOWED = {
    "size", "sizes", "numel", "stride", "strides", "dim", "data_ptr", "data", "const_data_ptr", "mutable_data_ptr",
    "is_contiguous", "contiguous", "scalar_type", "dtype", "device", "options", "is_cuda", "is_cpu",
    "get_device", "view", "reshape", "unsqueeze", "squeeze", "flatten", "permute", "transpose", "t", "expand",
    "item", "defined", "element_size", "nbytes", "storage_offset", "layout", "type", "resize", "new_empty",
    "new_zeros", "zero_", "fill_", "is_floating_point", "itemsize", "ndimension", "narrow", "as_strided",
    "unflatten", "chunk", "split", "select", "slice", "index", "size_bytes", "is_same", "equal", "count", "set",
    "get", "to", "sum", "max", "min", "any", "all", "add", "sub", "mul", "div", "apply", "put", "take", "fill",
    "clear", "reshape_as", "view_as", "expand_as", "detach", "join", "swap", "reset", "release",
}
# Tensor methods of the generic-name kind above are too common in plain C++ (std::, pybind11) to
# be told apart by a regex; "to", "sum", ... are allowed there and left to the dynamic record,
# which sees any aten op they would run.


def scan_dir(root):
    out = []
    py = os.path.join(root, "model_new.py")
    if os.path.isfile(py):
        with open(py, encoding="utf-8", errors="replace") as f:
            out += scan_python(f.read(), "model_new.py")
    else:
        out.append("model_new.py: missing (the workspace must define ModelNew in model_new.py)")
    kdir = os.path.join(root, "kernels")
    if os.path.isdir(kdir):
        methods = tensor_compute_methods()
        for name in sorted(os.listdir(kdir)):
            if name.endswith((".cu", ".cpp", ".cuh", ".h", ".hpp", ".cc")):
                with open(os.path.join(kdir, name), encoding="utf-8", errors="replace") as f:
                    out += scan_cpp(f.read(), "kernels/" + name, methods)
    return out


# ---- Python ---------------------------------------------------------------------------------
# Modules that torch's own modules import, reachable as their attributes (torch.hub.sys).
MODULES_REACHED_THROUGH_TORCH = {"hub", "sys", "os", "builtins", "importlib", "serialization", "multiprocessing",
                                 "overrides", "package", "distributed", "inspect", "types", "functools", "ctypes",
                                 "gc", "weakref", "threading", "subprocess", "pickle", "io", "warnings"}


class PyScan(ast.NodeVisitor):
    def __init__(self, fname):
        self.fname = fname
        self.out = []
        self.modules = {}  # local name -> module it names
        self.in_init = 0
        self.defined = set()
        self.classes = {}
        self.extension_functions = set()  # the functions load_inline binds (built by Compile)
        self.tensor_methods = tensor_compute_methods() | METHODS_ALLOWED
        self.depth = 0        # function nesting
        self.class_depth = 0  # class nesting

    def bad(self, node, msg):
        self.out.append(f"{self.fname}:{getattr(node, 'lineno', 0)}: {msg}")

    def visit_Import(self, node):
        for a in node.names:
            if a.name not in PY_IMPORTS:
                self.bad(node, f"import of '{a.name}' is not allowed (allowed: {', '.join(sorted(PY_IMPORTS))})")
            self.modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node):
        mod = node.module or ""
        for a in node.names:
            full = f"{mod}.{a.name}"
            if mod == "torch" and a.name in TORCH_FROM_IMPORTS:
                self.modules[a.asname or a.name] = full if a.name == "nn" else "torch.Tensor"
            elif mod in ("typing", "__future__", "math", "numbers", "dataclasses"):
                pass
            elif mod == "cuda_extension":
                self.modules[a.asname or a.name] = full
            elif mod == "torch.utils.cpp_extension" and a.name == "load_inline":
                # KernelBench style: Compile builds the sources (harness/inline.py)
                self.modules[a.asname or a.name] = "torch.utils.cpp_extension.load_inline"
            else:
                hint = " (only load_inline, whose sources Compile builds)" if a.name == "load" else ""
                self.bad(node, f"'from {mod} import {a.name}' is not allowed{hint}")

    def visit_Name(self, node):
        if node.id in FORBIDDEN_NAMES:
            self.bad(node, f"'{node.id}' is not allowed")
        self.generic_visit(node)

    def visit_Attribute(self, node):
        if node.attr.startswith("__") and node.attr != "__init__":
            self.bad(node, f"dunder attribute '{node.attr}' is not allowed")
        chain = attr_chain(node)
        root = self.modules.get(chain[0]) if chain else None
        if root and root.startswith("torch"):
            full = root.split(".") + chain[1:]
            if full[:2] == ["torch", "Tensor"] and len(full) > 2:
                # Tensor.matmul(a, b) is a.matmul(b): unbound methods follow the method rules
                if not self.in_init and full[2] not in METHODS_ALLOWED:
                    self.bad(node, f"'{'.'.join(full)}' computes with PyTorch")
            elif root != "torch.Tensor":
                self.check_torch(node, full)
        self.generic_visit(node)

    def check_torch(self, node, full):
        bad_anywhere = {"ops", "_C", "_dynamo", "compile", "jit", "library", "utils", "testing", "cuda", "_inductor",
                        "fx", "autograd", "backends", "_ops", "export"}
        if full[:4] == ["torch", "utils", "cpp_extension", "load_inline"]:
            return
        if len(full) > 1 and full[0] == "torch" and full[1] in bad_anywhere and full[1:3] != ["cuda", "is_available"]:
            self.bad(node, f"'{'.'.join(full)}' is not allowed")
            return
        # anywhere in the chain, __init__ included: a private name (torch._tensor._C reaches the
        # dispatcher) or a module torch happens to import (torch.hub.sys.modules, red team C)
        reach = [p for p in full[1:] if p.startswith("_") or p in MODULES_REACHED_THROUGH_TORCH]
        if full[0] == "torch" and reach:
            self.bad(node, f"'{'.'.join(full)}' reaches '{reach[0]}' through torch: not allowed")
            return
        if self.in_init:
            return
        if full[0] == "torch" and len(full) > 1:
            if full[1] == "nn" and len(full) > 2 and full[2] not in ("Module", "Parameter"):
                self.bad(node, f"'{'.'.join(full)}' computes with PyTorch outside __init__")
            elif full[1] not in TORCH_ALLOWED_IN_FORWARD:
                self.bad(node, f"'{'.'.join(full)}' computes with PyTorch (only allocation, views and "
                               f"cuda_extension calls may run in forward)")

    def visit_Assign(self, node):
        for t in node.targets:
            self.check_target(t)
            self.check_stored(t, node.value)
        self.generic_visit(node)

    def check_stored(self, t, value):
        """What goes on self: never a method's name (an attribute shadows the method the scan
        read), never a module or an uncalled torch function (called later as self.x(...), it
        would look like a method call; red team C stored torch.softmax this way)."""
        chain = attr_chain(t) if isinstance(t, ast.Attribute) else None
        if not chain or chain[0] != "self" or len(chain) != 2:
            return
        if any(chain[1] in methods for methods in self.classes.values()):
            self.bad(t, f"'self.{chain[1]} = ...' hides the method of that name")
        vchain = attr_chain(value) if isinstance(value, (ast.Attribute, ast.Name)) else None
        root = self.modules.get(vchain[0]) if vchain else None
        if root and (len(vchain) == 1 or vchain[-1] not in TORCH_ALLOWED_IN_FORWARD):
            self.bad(t, f"'self.{chain[1]} = {'.'.join(vchain)}' keeps a module or a torch function on self "
                        f"(allocate in __init__, call your cuda_extension kernels in forward)")

    def visit_AugAssign(self, node):
        self.check_target(node.target)
        self.generic_visit(node)

    def check_target(self, t):
        if isinstance(t, ast.Attribute):
            chain = attr_chain(t)
            if chain and chain[0] in self.modules:
                self.bad(t, f"assigning to '{'.'.join(chain)}' (monkey-patching a module) is not allowed")

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.MatMult) and not self.in_init:
            self.bad(node, "the @ operator computes with PyTorch")
        self.generic_visit(node)

    def visit_ClassDef(self, node):
        for b in node.bases:
            chain = attr_chain(b) if isinstance(b, ast.Attribute) else ([b.id] if isinstance(b, ast.Name) else [])
            root = self.modules.get(chain[0], chain[0]) if chain else ""
            full = ".".join(root.split(".") + chain[1:]) if chain else ""
            if full not in ("torch.nn.Module", "nn.Module"):
                self.bad(node, f"class {node.name} may only derive from nn.Module (not {full or ast.dump(b)[:40]})")
        self.classes[node.name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if self.depth or self.class_depth:
            self.bad(node, f"class {node.name}: classes may only be defined at module level")
        self.class_depth += 1
        self.generic_visit(node)
        self.class_depth -= 1

    def visit_FunctionDef(self, node):
        # only a class's own __init__ (a direct child of its body, not nested in a method)
        is_init = node.name == "__init__" and self.depth == 0 and self.class_depth == 1
        if node.name == "__init__" and not is_init:
            self.bad(node, "__init__ may only be a class's own constructor")
        self.in_init += is_init
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1
        self.in_init -= is_init

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self.generic_visit(node)

    def visit_Call(self, node):
        if not self.in_init:
            self.check_call(node)
        self.generic_visit(node)

    def check_call(self, node):
        f = node.func
        if isinstance(f, ast.Name):
            if f.id in self.classes:
                self.bad(node, f"constructing {f.id} outside __init__ (its __init__ may compute) is not allowed")
            elif f.id not in BUILTINS_ALLOWED and f.id not in self.defined and f.id not in self.modules:
                self.bad(node, f"call of '{f.id}' is not allowed in forward")
            return
        if not isinstance(f, ast.Attribute):
            self.bad(node, "calls of computed callables are not allowed in forward")
            return
        chain = attr_chain(f)
        if chain and chain[0] in self.modules:
            return  # module attributes: checked by visit_Attribute
        if chain and chain[0] == "self" and len(chain) == 2:
            if not any(chain[1] in methods for methods in self.classes.values()):
                self.bad(node, f"'self.{chain[1]}(...)' calls a submodule or attribute: nn layers compute "
                               f"with PyTorch (call your cuda_extension kernels instead)")
            return
        # a load_inline function named like a tensor method would let x.softmax() through
        bound = f.attr in self.extension_functions and f.attr not in self.tensor_methods
        if f.attr not in METHODS_ALLOWED and not bound:
            self.bad(node, f"method '.{f.attr}()' computes with PyTorch (allowed on tensors: views, metadata, "
                           f"allocation)")


def load_inline_functions(tree):
    """Names in the functions=[...] lists of load_inline calls: calls into the built module."""
    names = set()
    for node in ast.walk(tree):
        f = getattr(node, "func", None)
        if isinstance(node, ast.Call) and getattr(f, "id", getattr(f, "attr", None)) == "load_inline":
            for kw in node.keywords:
                if kw.arg == "functions":
                    names |= {c.value for c in ast.walk(kw.value)
                              if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return names


def attr_chain(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super":
        return ["super"] + parts[::-1]
    return []


def scan_python(src, fname):
    try:
        tree = ast.parse(src, filename=fname)
    except SyntaxError as exc:
        return [f"{fname}:{exc.lineno}: syntax error: {exc.msg}"]
    except (RecursionError, MemoryError, ValueError):
        return [f"{fname}: nested too deeply to check"]
    s = PyScan(fname)
    try:
        s.defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        s.extension_functions = load_inline_functions(tree)
        s.classes = {n.name: set() for n in tree.body if isinstance(n, ast.ClassDef)}
        s.visit(tree)
    except RecursionError:
        return [f"{fname}: nested too deeply to check"]
    if "ModelNew" not in s.classes:
        s.out.append(f"{fname}: defines no class ModelNew")
    return s.out


# ---- C++ / CUDA -----------------------------------------------------------------------------
_STRIP = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip_cpp(src):
    return _STRIP.sub(lambda m: "\n" * m.group(0).count("\n") if m.group(0)[0] == "/" else '""', src)


def tensor_compute_methods():
    try:
        import torch

        names = {n for n in dir(torch.Tensor) if not n.startswith("_")}
    except ImportError:
        names = set()
    return names - CPP_METHODS_ALLOWED


# Calling back into Python from C++ reaches torch's Python API (`py::module_::import("torch")`,
# a torch function passed in as a py::object or a std::function): PyTorch compute by another door.
_PY_CALLBACK = re.compile(
    r"\b(?:py|pybind11)\s*::\s*(?:module_?\s*::\s*import|object|handle|function|eval|exec|eval_file|"
    r"getattr|globals|reinterpret_borrow|reinterpret_steal)\b"
    r"|\bPy(?:Import|Run|Object_Call|Object_GetAttr|Object_Vectorcall|Eval_EvalCode|Eval_GetBuiltins)\w*"
    # reaching a Python object by name (sys.modules, a module's dict, the builtins) and calling it
    # through its type's slots (red team, session 22: torch.mul via PySys_GetObject + tp_call)
    r"|\bPy(?:Sys_Get|Dict_GetItem|Module_GetDict|Eval_Get|Object_GetItem|Vectorcall_|CFunction_Call)\w*"
    r"|\btp_(?:call|vectorcall|getattro|getattr)\b|\bTHPVariable_(?:Wrap|Unpack)\b"
    r"|\.\s*attr\s*\(|\bstd\s*::\s*function\b")


# The dispatcher's own state: what decides whether the judge's op record sees a call (red team C
# blinded it with tls_set_dispatch_key_excluded(DispatchKey::Python), and read whether it was on
# from TorchDispatchModeTLS). Kernels and bindings never need it.
_DISPATCH_STATE = re.compile(
    r"\b(?:DispatchKey\w*|\w*DispatchKeyGuard|\w*DispatchModeTLS|PythonDispatcherTLS|"
    r"PythonTorchFunctionTLS|tls_\w*dispatch\w*|raw_local_dispatch_key_set)\b"
    r"|\b(?:c10|at)\s*::\s*impl\b")


def scan_cpp(src, fname, methods):
    out = []
    code = strip_cpp(src)
    lines = code.split("\n")
    raw_lines = src.split("\n")
    for no, line in enumerate(lines, 1):
        m = _DISPATCH_STATE.search(line)
        if m:
            out.append(f"{fname}:{no}: '{m.group(0).strip()}' reaches the dispatcher's own state (what "
                       f"records and routes PyTorch calls); kernels and bindings have no use for it")
        if "##" in line:
            out.append(f"{fname}:{no}: '##' pastes identifiers together, which hides from this scan what "
                       f"the code calls; write names out")
        m = _PY_CALLBACK.search(line)
        if m:
            out.append(f"{fname}:{no}: '{m.group(0).strip()}' calls back into Python (PyTorch compute by another "
                       f"door); kernels and bindings take tensors and plain values only")
        raw = raw_lines[no - 1] if no - 1 < len(raw_lines) else ""
        if re.search(r"#\s*include\s*<\s*pybind11/(functional|eval|embed)\.h", raw):
            out.append(f"{fname}:{no}: this header lets C++ call Python")
        for m in re.finditer(r"\b(at|torch)\s*::\s*(\w+)(?:\s*::\s*(\w+))?", line):
            ns, name, sub = m.group(1), m.group(2), m.group(3)
            if name not in CPP_NS_ALLOWED:
                out.append(f"{fname}:{no}: '{ns}::{name}' computes with PyTorch (only allocation, tensor types "
                           f"and metadata may come from torch:: / at::)")
            elif name in CPP_NS_FORBIDDEN_SUB and sub:
                out.append(f"{fname}:{no}: '{ns}::{name}::{sub}': {CPP_NS_FORBIDDEN_SUB[name]}")
        for m in re.finditer(r"(?:\.|->)\s*(\w+)\s*(?:<[^<>;()]*>)?\s*\(", line):
            if m.group(1) in methods:
                out.append(f"{fname}:{no}: tensor method '.{m.group(1)}()' computes with PyTorch")
        if re.search(r"#\s*include\s*<\s*(ATen/native|torch/nn|ATen/ops/(?!empty|zeros|ones|full))", src.split("\n")[no - 1]
                     if no - 1 < len(src.split("\n")) else ""):
            out.append(f"{fname}:{no}: this header brings PyTorch compute ops")
    return out


# ---- the built module's imports ---------------------------------------------------------------
# The source scan reads text, and text can hide a call (argument-dependent lookup: `mul(a, b)` is
# at::mul with no at:: in sight); the dispatch-mode record runs inside the candidate's process,
# which can exclude itself from it. What the linker had to leave unresolved cannot hide: every
# ATen op a module calls is an undefined reference to at::_ops::<op>::call (or redispatch).
EXT_OPS_ALLOWED = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill", "fill_", "zero_",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "permute", "transpose",
    "t", "squeeze", "unsqueeze", "slice", "select", "alias", "detach", "contiguous", "flatten", "unflatten",
    "view_as", "reshape_as", "expand_as", "narrow", "split", "chunk", "unbind", "movedim", "item",
    "_local_scalar_dense", "resize_", "set_", "is_same_size", "sym_size", "sym_stride", "sym_numel",
}
_OP_REF = re.compile(r"\bat::_ops::(\w+)::(?:call|redispatch)\b")
_BACKEND_FN = re.compile(r"\bat::(native|cpu|meta|compositeexplicitautograd\w*|compositeimplicitautograd\w*)::(\w+)")
_CUDA_FN = re.compile(r"\bat::cuda::(\w+)")
_CUDA_FN_OK = re.compile(r"^(getCurrent\w+|get\w*Handle\w*|getDeviceProperties|getStreamFromPool|"
                         r"setCurrent\w+|device_synchronize|CUDA\w*|\w*Guard\w*|warp_size)$")
_DYNAMIC = re.compile(r"\b(c10::Dispatcher::|c10::OperatorHandle|dlsym\b|dlopen\b|dlvsym\b)")
# the dispatcher's thread-local state, read or changed (honest modules import only
# c10::impl::ExcludeDispatchKeyGuard and c10::impl::GPUTrace from c10::impl, through torch's headers)
_DISPATCH_TLS = re.compile(r"\bc10::impl::(TorchDispatchModeTLS|PythonDispatcherTLS|PythonTorchFunctionTLS|"
                           r"tls_\w+|raw_local_dispatch_key_set|_force_tls_local_dispatch_key_set)")


def op_allowed(op):
    """at::_ops names are <op>[_<overload>]: allowed when the op (without its overload) is."""
    if any(w in op for w in ("scatter", "copy", "backward")):
        return False
    return op in EXT_OPS_ALLOWED or any(op.startswith(a + "_") for a in EXT_OPS_ALLOWED)


NOBODY = 65534


def _bounded():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (60, 60))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def unprivileged():
    """How nm runs: it parses an ELF file built from the agent's sources, and a parser bug must
    not run as root (red team): as nobody, with no groups, bounded. As is when not root."""
    if os.geteuid() != 0:
        return {"preexec_fn": _bounded}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": [], "preexec_fn": _bounded}


def scan_extension(so_path, nm="nm"):
    """Violations among the undefined symbols of the built module (nm -D, demangled)."""
    try:
        # opened here, shown to nm as its own fd: the module sits below root-only directories,
        # and reopening /proc/self/fd/N checks the file's mode alone (0444)
        fd = os.open(so_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            out = subprocess.run([nm, "-D", "--undefined-only", "-C", f"/proc/self/fd/{fd}"],
                                 capture_output=True, text=True, timeout=60, pass_fds=(fd,),
                                 **unprivileged())
        finally:
            os.close(fd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"cannot list the module's symbols: {exc}")
    if out.returncode != 0:
        raise RuntimeError(f"nm failed on the module: {out.stderr[-300:]}")
    bad = set()
    for line in out.stdout.splitlines():
        for m in _OP_REF.finditer(line):
            if not op_allowed(m.group(1)):
                bad.add(f"aten op {m.group(1)} (ATen computes; only allocation and views may come from it)")
        for m in _BACKEND_FN.finditer(line):
            bad.add(f"at::{m.group(1)}::{m.group(2)} (an ATen kernel called directly)")
        for m in _CUDA_FN.finditer(line):
            if not _CUDA_FN_OK.match(m.group(1)):
                bad.add(f"at::cuda::{m.group(1)} (an ATen CUDA kernel called directly)")
        for m in _DISPATCH_TLS.finditer(line):
            bad.add(f"c10::impl::{m.group(1)} (the dispatcher's state, which decides what the op record sees)")
        if _DYNAMIC.search(line):
            bad.add(f"{_DYNAMIC.search(line).group(1).rstrip(':')} (looking operators or symbols up at run time)")
    return [f"cuda_extension: calls {b}" for b in sorted(bad)]
