"""Turns a fixture's .cu file into host C++ for the CPU emulator (emu.h).

  * local `#include "x.cuh"` files are inlined (and transformed the same way);
  * <cuda_runtime.h> becomes emu.h, <cooperative_groups.h> is dropped (emu.h has the cluster calls);
  * `extern __shared__ T name[];` becomes a pointer to the running block's dynamic shared memory;
  * the inline-asm helpers (cp_async16, cp_async_commit, cp_async_wait<N>, to_tf32, mma_tf32) become
    calls to their emulations;
  * everything from the line `// ---- host launcher ----` on is dropped (the tests launch kernels
    themselves).

usage: transform.py SRC.cu DST.inc
"""
import os
import re
import sys

MARK = "// ---- host launcher ----"

REPL = {
    "cp_async16": "void cp_async16(void *dst, const void *src, int bytes) { emu_cp_async16(dst, src, bytes); }",
    "cp_async_commit": "void cp_async_commit() { emu_cp_commit(); }",
    "to_tf32": "uint32_t to_tf32(float f) { return emu_tf32(f); }",
    "mma_tf32": "void mma_tf32(float *c, const uint32_t *a, const uint32_t *b) { emu_mma_tf32(c, a, b); }",
}


def body_end(s, j):
    k = s.index("{", j)
    depth = 0
    while True:
        if s[k] == "{":
            depth += 1
        elif s[k] == "}":
            depth -= 1
            if depth == 0:
                return k + 1
        k += 1


def inline_includes(path, seen):
    s = open(path).read()
    here = os.path.dirname(path)

    def sub(m):
        name = os.path.join(here, m.group(1))
        if name in seen:
            return ""
        seen.add(name)
        return inline_includes(name, seen)

    return re.sub(r'^#include "([\w.]+\.cuh)"\s*$', sub, s, flags=re.M)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    s = inline_includes(src, set())
    i = s.find(MARK)
    assert i > 0, f"{src}: no '{MARK}' line"
    s = s[:i]
    s = s.replace("#include <cuda_runtime.h>", '#include "emu.h"')
    s = s.replace("#include <cooperative_groups.h>", "")
    s = re.sub(r"extern __shared__ (?:__align__\(\d+\) )?(\w+) (\w+)\[\];",
               r"\1 *\2 = (\1 *)emu_dyn_smem();", s)
    for name, rep in REPL.items():
        for m in list(re.finditer(r"__device__ __forceinline__ [\w\s\*]+?\b" + name + r"\(", s))[::-1]:
            e = body_end(s, m.end())
            s = s[:m.start()] + "inline " + rep + s[e:]
    for m in list(re.finditer(r"template <int N>\s*__device__ __forceinline__ void cp_async_wait\(", s))[::-1]:
        e = body_end(s, m.end())
        s = s[:m.start()] + "template <int N> inline void cp_async_wait() { emu_cp_wait(N); }" + s[e:]
    code = re.sub(r"//[^\n]*", "", s)
    left = [l for l in code.splitlines() if re.search(r"\basm\b", l)]
    assert not left, f"{src}: inline asm left after the transform: {left}"
    open(dst, "w").write(s)


if __name__ == "__main__":
    main()
