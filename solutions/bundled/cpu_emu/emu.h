// emu.h: minimal CPU emulation of the CUDA features the solutions use: one std::thread per CUDA thread,
// blocks run one at a time, __syncthreads = block barrier, warp shuffles and mma.sync through a
// per-warp exchange with a warp barrier. cp.async is deferred until wait_group (EMU_CP_EARLY=1:
// copied at issue). Enough to test index math and the algorithms, not the memory model.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
#include <deque>
#include <algorithm>
#include <memory>
#include <cstdio>
#include <cstdlib>

struct dim3 { unsigned x = 1, y = 1, z = 1; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct uint3e { unsigned x, y, z; };
inline thread_local uint3e threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline thread_local std::barrier<> *g_block_bar;
struct WarpX { std::barrier<> *bar; float f[32]; uint32_t u[32][10]; };
inline thread_local std::vector<WarpX> *g_warps;
inline std::vector<unsigned char> g_dyn_smem;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)
typedef int cudaError_t;
typedef void *cudaStream_t;
#define cudaSuccess 0
#define INFINITY_F HUGE_VALF

inline void __syncthreads() { g_block_bar->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __nanosleep(unsigned) { std::this_thread::yield(); }
inline WarpX &mywarp() { return (*g_warps)[threadIdx.x / 32]; }
inline float __shfl_xor_sync(unsigned, float v, int o)
{
    WarpX &w = mywarp(); int l = threadIdx.x & 31;
    w.f[l] = v; w.bar->arrive_and_wait(); float r = w.f[l ^ o]; w.bar->arrive_and_wait(); return r;
}
template <class T> inline T atomicAdd(T *p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
inline int atomicExch(int *p, int v) { return std::atomic_ref<int>(*p).exchange(v); }
template <class T> inline T __ldg(const T *p) { return *p; }
template <class T> inline T __ldcg(const T *p) { return *p; }
template <class T> inline T __ldcs(const T *p) { return *p; }
template <class T> inline void __stcs(T *p, T v) { *p = v; }
inline float __expf(float x) { return expf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
inline uint32_t __cvta_generic_to_shared(const void *p) { return (uint32_t)((const unsigned char *)p - g_dyn_smem.data()); }
using std::min; using std::max;

// cp.async emulation
struct CpReq { uint32_t dst; const void *src; int bytes; };
inline thread_local std::deque<std::vector<CpReq>> t_groups;
inline thread_local std::vector<CpReq> t_open;
inline bool emu_cp_early() { static int e = getenv("EMU_CP_EARLY") ? atoi(getenv("EMU_CP_EARLY")) : 0; return e; }
inline void emu_do_copy(const CpReq &r) { unsigned char *d = g_dyn_smem.data() + r.dst; memset(d, 0, 16); if (r.bytes) memcpy(d, r.src, r.bytes); }
inline void emu_cp_async16(uint32_t dst, const void *src, int bytes)
{
    if (emu_cp_early()) emu_do_copy({dst, src, bytes}); else t_open.push_back({dst, src, bytes});
}
inline void emu_cp_commit() { t_groups.push_back(t_open); t_open.clear(); }
inline void emu_cp_wait(int n)
{
    while ((int)t_groups.size() > n) { for (auto &r : t_groups.front()) emu_do_copy(r); t_groups.pop_front(); }
}
inline uint32_t emu_tf32(float f)
{
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u; // round half away from zero
    else u &= 0xffffe000u;
    return u;
}
inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
// m16n8k8 tf32 per the PTX fragment layouts
inline void emu_mma_tf32(float *c, const uint32_t *a, const uint32_t *b)
{
    WarpX &w = mywarp(); int l = threadIdx.x & 31;
    for (int i = 0; i < 4; ++i) w.u[l][i] = a[i];
    w.u[l][4] = b[0]; w.u[l][5] = b[1];
    w.bar->arrive_and_wait();
    float A[16][8], B[8][8];
    for (int ln = 0; ln < 32; ++ln) {
        int g = ln >> 2, t = ln & 3;
        A[g][t] = u2f(w.u[ln][0]); A[g + 8][t] = u2f(w.u[ln][1]);
        A[g][t + 4] = u2f(w.u[ln][2]); A[g + 8][t + 4] = u2f(w.u[ln][3]);
        B[t][g] = u2f(w.u[ln][4]); B[t + 4][g] = u2f(w.u[ln][5]);
    }
    w.bar->arrive_and_wait();
    int g = l >> 2, t = l & 3;
    for (int j = 0; j < 4; ++j) {
        int row = g + (j >= 2 ? 8 : 0), col = 2 * t + (j & 1);
        double s = c[j];
        for (int k = 0; k < 8; ++k) s += (double)A[row][k] * B[k][col];
        c[j] = (float)s;
    }
}

// Runs kernel over the grid, blocks one at a time, one std::thread per CUDA thread.
template <class F>
inline void emu_launch(dim3 grid, dim3 block, size_t dyn_smem, F &&body)
{
    gridDim = grid; blockDim = block;
    g_dyn_smem.assign(dyn_smem + 16, 0);
    unsigned nt = block.x;
    for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> bar(nt);
        std::vector<WarpX> warps((nt + 31) / 32);
        std::vector<std::unique_ptr<std::barrier<>>> wb;
        for (auto &w : warps) { wb.emplace_back(new std::barrier<>(32)); w.bar = wb.back().get(); }
        std::vector<std::thread> th;
        for (unsigned t = 0; t < nt; ++t)
            th.emplace_back([&, t] {
                threadIdx = {t, 0, 0}; blockIdx = {bx, by, bz}; g_block_bar = &bar; g_warps = &warps;
                t_groups.clear(); t_open.clear(); body();
            });
        for (auto &x : th) x.join();
    }
}
// All blocks at once (each block's shared variables must be made per-block by the caller).
template <class F>
inline void emu_launch_concurrent(dim3 grid, dim3 block, F &&body)
{
    gridDim = grid; blockDim = block;
    unsigned nt = block.x, nb = grid.x;
    std::vector<std::unique_ptr<std::barrier<>>> bars;
    std::vector<std::vector<WarpX>> warps(nb);
    std::vector<std::unique_ptr<std::barrier<>>> wb;
    for (unsigned b = 0; b < nb; ++b) {
        bars.emplace_back(new std::barrier<>(nt));
        warps[b].resize((nt + 31) / 32);
        for (auto &w : warps[b]) { wb.emplace_back(new std::barrier<>(32)); w.bar = wb.back().get(); }
    }
    std::vector<std::thread> th;
    for (unsigned b = 0; b < nb; ++b)
        for (unsigned t = 0; t < nt; ++t)
            th.emplace_back([&, b, t] {
                threadIdx = {t, 0, 0}; blockIdx = {b, 0, 0}; g_block_bar = bars[b].get(); g_warps = &warps[b];
                t_groups.clear(); t_open.clear(); body();
            });
    for (auto &x : th) x.join();
}
