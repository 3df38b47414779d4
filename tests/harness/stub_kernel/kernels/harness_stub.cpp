// harness_stub.cpp: a do-nothing-special kernel (a copy loop) that the kgym-side harness tests add
// to a CPU episode when a case ships no C++ of its own (a pure-Python exploit), so that Compile
// succeeds and the evaluation proper (scan, checks, probe, timing) judges the exploit, instead
// of the build failing on "no sources". ModelNew never calls it.
#include <cstdint>

extern "C" void harness_stub_copy_cpu(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i];
}
