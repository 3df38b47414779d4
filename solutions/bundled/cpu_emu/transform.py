"""Turns a solution's .cu file into host C++ for the CPU emulator (emu.h): cuda_runtime.h becomes
emu.h, the inline-asm helpers (cp.async, cvt.rna.tf32, mma.sync, ld.global.nc) become calls to
their emulations, and the host launcher (from the `cut` marker on) is dropped.

usage: transform.py SRC.cu DST.inc CUT_MARKER [--per-block-shared]
"""
import re, sys
src, dst, cut = sys.argv[1], sys.argv[2], sys.argv[3]
per_block = "--per-block-shared" in sys.argv[4:]
s = open(src).read()
s = s.replace("#include <cuda_runtime.h>", '#include "emu.h"')
i = s.find(cut); assert i > 0, cut
s = s[:i]
s = s.replace("extern __shared__ __align__(16) float smem[];", "float *smem = (float *)g_dyn_smem.data();")
REPL = {
 "to_tf32": "uint32_t to_tf32(float f) { return emu_tf32(f); }",
 "cp_async16": "void cp_async16(uint32_t a, const void *g, int b) { emu_cp_async16(a, g, b); }",
 "cp_async_commit": "void cp_async_commit() { emu_cp_commit(); }",
 "mma_tf32": "void mma_tf32(float *c, const uint32_t *a, const uint32_t *b) { emu_mma_tf32(c, a, b); }",
 "ld_stream": "float4 ld_stream(const float4 *p) { return *p; }",
 "ld_keep": "float4 ld_keep(const float4 *p) { return *p; }",
}
def body_end(s, j):
    k = s.index("{", j); depth = 0
    while True:
        if s[k] == "{": depth += 1
        elif s[k] == "}":
            depth -= 1
            if depth == 0: return k + 1
        k += 1
for name, rep in REPL.items():
    m = re.search(r"__device__ __forceinline__ [\w\s\*]+?\b" + name + r"\(", s)
    if not m: continue
    e = body_end(s, m.end())
    s = s[:m.start()] + "inline " + rep + s[e:]
s = re.sub(r"template <int N>\s*__device__ __forceinline__ void cp_async_wait\(\) \{[^\n]*\}",
           "template <int N> inline void cp_async_wait() { emu_cp_wait(N); }", s)
assert "asm" not in re.sub(r"//[^\n]*", "", s), [l for l in s.splitlines() if "asm" in l and not l.strip().startswith("//")]
if per_block:  # each block's __shared__ variables, for emu_launch_concurrent (at most 64 blocks)
    s = re.sub(r"__shared__ (\w+) (\w+)(\[\d+\])?;",
               lambda m: f"static {m.group(1)} {m.group(2)}_all[64]{m.group(3) or ''}; auto &{m.group(2)} = {m.group(2)}_all[blockIdx.x];", s)
open(dst, "w").write(s)
