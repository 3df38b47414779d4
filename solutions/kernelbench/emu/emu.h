// emu.h: a small CPU emulation of the CUDA features the KernelBench fixtures use, to test their
// index math and algorithms on a machine without a GPU. One std::thread per CUDA thread:
//   emu_launch          blocks one after another (static __shared__ variables are fine);
//   emu_launch_cluster  the blocks of one thread-block cluster at once (cluster barrier,
//                       map_shared_rank into the other blocks' dynamic shared memory);
// __syncthreads is a block barrier; warp shuffles and mma.sync go through a per-warp exchange
// with a warp barrier; cp.async copies are deferred until cp.async.wait_group lets them land
// (EMU_CP_EARLY=1: copied at issue). It checks logic, not the GPU memory model or speed.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct emu_uint3 { unsigned x, y, z; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

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

struct EmuWarp {
    std::barrier<> *bar;
    uint64_t slot[32];
    uint32_t frag[32][6];
};
struct EmuBlock {
    std::barrier<> *bar;
    std::vector<EmuWarp> *warps;
    unsigned char *dyn_smem;
};
// A barrier that can be split into arrive and wait (barrier.cluster.arrive / .wait).
struct EmuSplitBarrier {
    std::mutex mu;
    std::condition_variable cv;
    long expected, count = 0, phase = 0;
    explicit EmuSplitBarrier(long n) : expected(n) {}
    long arrive()
    {
        std::lock_guard<std::mutex> g(mu);
        long p = phase;
        if (++count == expected) { count = 0; ++phase; cv.notify_all(); }
        return p;
    }
    void wait(long p)
    {
        std::unique_lock<std::mutex> g(mu);
        cv.wait(g, [&] { return phase != p; });
    }
};
struct EmuCluster {
    EmuSplitBarrier *bar;
    std::vector<unsigned char *> smem; // each block's dynamic shared memory, by rank
    unsigned size;
};

inline thread_local emu_uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline thread_local EmuBlock *t_block;
inline thread_local EmuCluster *t_cluster;
inline thread_local unsigned t_rank;
inline thread_local long t_cluster_phase;

inline unsigned char *emu_dyn_smem() { return t_block->dyn_smem; }
inline void __syncthreads() { t_block->bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { (*t_block->warps)[threadIdx.x / 32].bar->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

inline EmuWarp &emu_warp() { return (*t_block->warps)[threadIdx.x / 32]; }
template <class T> inline T emu_shfl(T v, int src)
{
    static_assert(sizeof(T) <= 8, "shuffle of a large type");
    EmuWarp &w = emu_warp();
    const int l = threadIdx.x & 31;
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    w.slot[l] = u;
    w.bar->arrive_and_wait();
    uint64_t r = w.slot[src & 31];
    w.bar->arrive_and_wait();
    T out;
    memcpy(&out, &r, sizeof(T));
    return out;
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int m) { return emu_shfl(v, (threadIdx.x & 31) ^ m); }
template <class T> inline T __shfl_sync(unsigned, T v, int src) { return emu_shfl(v, src); }
template <class T> inline T __shfl_down_sync(unsigned, T v, int d)
{
    int l = threadIdx.x & 31;
    return emu_shfl(v, l + d < 32 ? l + d : l);
}

template <class T> inline T __ldg(const T *p) { return *p; }
template <class T> inline T __ldcs(const T *p) { return *p; }
template <class T> inline T __ldcg(const T *p) { return *p; }
template <class T> inline void __stcs(T *p, T v) { *p = v; }
template <class T> inline void __stcg(T *p, T v) { *p = v; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
using std::max;
using std::min;

// ---- cooperative_groups: the cluster calls the fixtures use ----
namespace cooperative_groups {
struct cluster_group {
    void sync() const { t_cluster->bar->wait(t_cluster->bar->arrive()); }
    struct token { long phase; };
    token barrier_arrive() const { t_cluster_phase = t_cluster->bar->arrive(); return {t_cluster_phase}; }
    void barrier_wait() const { t_cluster->bar->wait(t_cluster_phase); }
    void barrier_wait(token &&) const { barrier_wait(); }
    unsigned block_rank() const { return t_rank; }
    unsigned num_blocks() const { return t_cluster->size; }
    template <class T> T *map_shared_rank(T *p, int rank) const
    {
        const std::ptrdiff_t off = (const unsigned char *)p - t_block->dyn_smem;
        if (off < 0) { fprintf(stderr, "map_shared_rank: not a dynamic shared memory address\n"); abort(); }
        return (T *)(t_cluster->smem[rank] + off);
    }
};
inline cluster_group this_cluster() { return {}; }
} // namespace cooperative_groups

// ---- cp.async, cvt.rna.tf32, mma.sync m16n8k8 tf32 ----
struct EmuCp { void *dst; const void *src; int bytes; };
inline thread_local std::deque<std::vector<EmuCp>> t_cp_groups;
inline thread_local std::vector<EmuCp> t_cp_open;
inline bool emu_cp_early()
{
    static int e = getenv("EMU_CP_EARLY") ? atoi(getenv("EMU_CP_EARLY")) : 0;
    return e != 0;
}
inline void emu_cp_do(const EmuCp &c)
{
    memset(c.dst, 0, 16);
    if (c.bytes) memcpy(c.dst, c.src, c.bytes);
}
inline void emu_cp_async16(void *dst, const void *src, int bytes)
{
    if (emu_cp_early()) emu_cp_do({dst, src, bytes});
    else t_cp_open.push_back({dst, src, bytes});
}
inline void emu_cp_commit() { t_cp_groups.push_back(std::move(t_cp_open)); t_cp_open.clear(); }
inline void emu_cp_wait(int n)
{
    while ((int)t_cp_groups.size() > n) {
        for (auto &c : t_cp_groups.front()) emu_cp_do(c);
        t_cp_groups.pop_front();
    }
}
inline uint32_t emu_tf32(float f) // cvt.rna: round to nearest, ties away from zero
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    else u &= 0xffffe000u;
    return u;
}
inline float emu_u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
// D = A(16x8) * B(8x8) + C per the PTX fragment layouts of mma.m16n8k8 .tf32:
// a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (k=t, n=g), b1 (k=t+4, n=g);
// c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1); g = lane / 4, t = lane % 4.
inline void emu_mma_tf32(float *c, const uint32_t *a, const uint32_t *b)
{
    EmuWarp &w = emu_warp();
    const int l = threadIdx.x & 31;
    for (int i = 0; i < 4; ++i) w.frag[l][i] = a[i];
    w.frag[l][4] = b[0];
    w.frag[l][5] = b[1];
    w.bar->arrive_and_wait();
    float A[16][8], B[8][8];
    for (int ln = 0; ln < 32; ++ln) {
        const int g = ln >> 2, t = ln & 3;
        A[g][t] = emu_u2f(w.frag[ln][0]);
        A[g + 8][t] = emu_u2f(w.frag[ln][1]);
        A[g][t + 4] = emu_u2f(w.frag[ln][2]);
        A[g + 8][t + 4] = emu_u2f(w.frag[ln][3]);
        B[t][g] = emu_u2f(w.frag[ln][4]);
        B[t + 4][g] = emu_u2f(w.frag[ln][5]);
    }
    w.bar->arrive_and_wait();
    const int g = l >> 2, t = l & 3;
    for (int j = 0; j < 4; ++j) {
        const int row = g + (j >= 2 ? 8 : 0), col = 2 * t + (j & 1);
        double s = c[j];
        for (int k = 0; k < 8; ++k) s += (double)A[row][k] * B[k][col];
        c[j] = (float)s;
    }
}

// ---- launches ----
inline void emu_run_blocks(const std::vector<emu_uint3> &blocks, unsigned nt, size_t dyn_smem,
                           bool cluster, const std::function<void()> &body);

template <class F>
inline void emu_launch(dim3 grid, dim3 block, size_t dyn_smem, F &&body)
{
    gridDim = grid;
    blockDim = block;
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx)
                emu_run_blocks({{bx, by, bz}}, block.x, dyn_smem, false, body);
}

// Blocks [c * cs, c * cs + cs) of a 1-D grid form cluster c; each cluster's blocks run at once.
template <class F>
inline void emu_launch_cluster(dim3 grid, dim3 block, size_t dyn_smem, unsigned cs, F &&body)
{
    gridDim = grid;
    blockDim = block;
    if (grid.x % cs) { fprintf(stderr, "grid not a multiple of the cluster size\n"); abort(); }
    for (unsigned c = 0; c < grid.x / cs; ++c) {
        std::vector<emu_uint3> blocks;
        for (unsigned r = 0; r < cs; ++r) blocks.push_back({c * cs + r, 0, 0});
        emu_run_blocks(blocks, block.x, dyn_smem, true, body);
    }
}

inline void emu_run_blocks(const std::vector<emu_uint3> &blocks, unsigned nt, size_t dyn_smem,
                           bool cluster, const std::function<void()> &body)
{
    if (nt % 32) { fprintf(stderr, "block size must be a multiple of 32\n"); abort(); }
    const size_t nb = blocks.size();
    std::vector<std::unique_ptr<std::barrier<>>> bars, wbars;
    std::vector<std::vector<EmuWarp>> warps(nb);
    std::vector<std::vector<unsigned char>> smem(nb);
    std::vector<EmuBlock> eb(nb);
    EmuSplitBarrier cbar((long)(nb * nt));
    EmuCluster ec{&cbar, {}, (unsigned)nb};
    for (size_t b = 0; b < nb; ++b) {
        bars.emplace_back(new std::barrier<>(nt));
        warps[b].resize(nt / 32);
        for (auto &w : warps[b]) {
            wbars.emplace_back(new std::barrier<>(32));
            w.bar = wbars.back().get();
        }
        smem[b].assign(dyn_smem + 16, 0xcd); // garbage, as on a GPU
        eb[b] = {bars[b].get(), &warps[b], smem[b].data()};
        ec.smem.push_back(smem[b].data());
    }
    std::vector<std::thread> th;
    for (size_t b = 0; b < nb; ++b)
        for (unsigned t = 0; t < nt; ++t)
            th.emplace_back([&, b, t] {
                threadIdx = {t, 0, 0};
                blockIdx = blocks[b];
                t_block = &eb[b];
                t_cluster = cluster ? &ec : nullptr;
                t_rank = (unsigned)b;
                t_cp_groups.clear();
                t_cp_open.clear();
                body();
                if (!t_cp_open.empty() || !t_cp_groups.empty()) emu_cp_wait(0);
            });
    for (auto &x : th) x.join();
}
