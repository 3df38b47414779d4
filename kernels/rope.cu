/* rope.cu: rotary position embedding in HF's rotate_half layout, in place; see kernels.h.
 *
 * A thread owns one pair index i < hd/2 of one token t, computes cos/sin of pos[t] * inv_freq[i]
 * once (fp32 angle as the CPU reference forms it, accurate sincosf: angles reach thousands of
 * radians, where fast __sinf is useless) and rotates the pair (i, i + hd/2) of up to
 * ROPE_HEADS heads of that token: blockIdx.y picks the group of heads. Neighbouring threads
 * take neighbouring i, so each head's halves are read and written as contiguous runs. All of a
 * thread's loads come before its stores, so the loads of its heads are in flight together.
 *
 * One launch may rotate q and k and also write the KV cache (kg_rope_qk_kv_write: a decode
 * step's RoPE and cache write, as kg_rope_qk then kg_kv_write): the threads of k's heads store
 * their rotated pairs to the cache as well, and a third band of grid y copies v's heads there.
 * The cache gets exactly the bits the two calls would give (the same values, stored). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"

typedef __nv_bfloat16 bf16;

/* heads rotated by one thread (each costs 2 loads and 2 stores, the sincosf is shared) */
#define ROPE_HEADS 4
#define ROPE_THREADS 256

/* One tensor of a launch: x [T, heads, hd], its heads in groups of ROPE_HEADS along grid y. */
typedef struct {
    bf16 *x;
    int heads, groups;
} rope_tensor;

/* The KV cache a launch also writes (k_cache NULL: none); the device-side twin of kg_kv_dest. */
typedef struct {
    bf16 *k_cache, *v_cache;
    const bf16 *v;
    const int32_t *slot;
    int n_slots, max_len;
} rope_cache;

/* Token t's row of the cache, [slot[t], pos[t]]; *ok false (and row 0) when either is out of
 * range: the token is skipped, as kg_kv_write skips it. */
static __device__ __forceinline__ size_t rope_cache_row(const rope_cache &c, const int32_t *pos,
                                                        size_t t, bool *ok)
{
    const int sl = c.slot[t], p = pos[t];
    *ok = sl >= 0 && sl < c.n_slots && p >= 0 && p < c.max_len;
    return *ok ? (size_t)sl * (size_t)c.max_len + (size_t)p : 0;
}

/* Band 3 of grid y: v's heads h0 .. h0 + ROPE_HEADS - 1, pair (i, i + half) of token t, copied as
 * they are to the cache. */
static __device__ void rope_copy_v(const rope_cache &c, const int32_t *pos, size_t t, int i, int h0,
                                   int heads, int hd)
{
    bool ok;
    const size_t row = rope_cache_row(c, pos, t, &ok);
    if (!ok)
        return;
    const int half = hd / 2;
    const bf16 *src = c.v + (t * (size_t)heads + (size_t)h0) * (size_t)hd + (size_t)i;
    bf16 *dst = c.v_cache + (row * (size_t)heads + (size_t)h0) * (size_t)hd + (size_t)i;
    /* loads first, as in the rotation: the compiler must assume the cache may overlap v, so
     * interleaved, each head's loads would wait for the previous head's stores */
    bf16 a[ROPE_HEADS], b[ROPE_HEADS];
#pragma unroll
    for (int j = 0; j < ROPE_HEADS; j++)
        if (h0 + j < heads) {
            a[j] = src[(size_t)j * hd];
            b[j] = src[(size_t)j * hd + half];
        }
#pragma unroll
    for (int j = 0; j < ROPE_HEADS; j++)
        if (h0 + j < heads) {
            dst[(size_t)j * hd] = a[j];
            dst[(size_t)j * hd + half] = b[j];
        }
}

/* Rotates up to two tensors (q then k: blockIdx.y past the first's groups is the second's); with
 * a cache, k's rotated pairs go to it too and a third band of groups copies v there. */
static __global__ void rope_kernel(rope_tensor first, rope_tensor second, rope_cache cache,
                                   const int32_t *pos, const float *inv_freq, int T, int hd,
                                   float sgn)
{
    pdl_launch_dependents();
    pdl_wait(); /* q, k, v and the positions come from the kernels before */
    const int band_y = (int)blockIdx.y;
    const bool in_first = band_y < first.groups;
    const bool in_v = band_y >= first.groups + second.groups; /* only with a cache */
    int half = hd / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * (size_t)half)
        return;
    size_t t = idx / (size_t)half;
    int i = (int)(idx % (size_t)half);
    if (in_v) {
        rope_copy_v(cache, pos, t, i, (band_y - first.groups - second.groups) * ROPE_HEADS,
                    second.heads, hd);
        return;
    }
    bf16 *x = in_first ? first.x : second.x;
    const int heads = in_first ? first.heads : second.heads;
    const int h0 = (band_y - (in_first ? 0 : first.groups)) * ROPE_HEADS;

    float angle = (float)pos[t] * inv_freq[i];
    float sn, cs;
    sincosf(angle, &sn, &cs);
    sn *= sgn; /* the inverse rotation is the rotation by -angle */

    bf16 *base = x + (t * (size_t)heads + (size_t)h0) * (size_t)hd + (size_t)i;
    float a[ROPE_HEADS], b[ROPE_HEADS];
#pragma unroll
    for (int j = 0; j < ROPE_HEADS; j++) {
        a[j] = 0.0f, b[j] = 0.0f;
        if (h0 + j < heads) {
            a[j] = __bfloat162float(base[(size_t)j * hd]);
            b[j] = __bfloat162float(base[(size_t)j * hd + half]);
        }
    }
    bool to_cache = false;
    bf16 *cached = NULL;
    if (!in_first && cache.k_cache) {
        const size_t row = rope_cache_row(cache, pos, t, &to_cache);
        if (to_cache)
            cached = cache.k_cache + (row * (size_t)heads + (size_t)h0) * (size_t)hd + (size_t)i;
    }
#pragma unroll
    for (int j = 0; j < ROPE_HEADS; j++) {
        if (h0 + j < heads) {
            const bf16 lo = __float2bfloat16_rn(a[j] * cs - b[j] * sn);
            const bf16 hi = __float2bfloat16_rn(b[j] * cs + a[j] * sn);
            base[(size_t)j * hd] = lo;
            base[(size_t)j * hd + half] = hi;
            if (to_cache) {
                cached[(size_t)j * hd] = lo;
                cached[(size_t)j * hd + half] = hi;
            }
        }
    }
}

/* The launch of kg_rope (k NULL, Hkv 0), kg_rope_qk and kg_rope_qk_kv_write (cache.k_cache set). */
static cudaError_t rope_launch(kg_bf16 *q, kg_bf16 *k, const int32_t *pos, const float *inv_freq,
                               int T, int Hq, int Hkv, int hd, int sign, rope_cache cache,
                               cudaStream_t s)
{
    if (T < 0 || Hq <= 0 || Hkv < 0 || hd <= 0 || hd % 2 != 0 || (sign != 1 && sign != -1))
        return cudaErrorInvalidValue;
    /* groups rounded up without forming heads + ROPE_HEADS - 1 (overflows near INT_MAX) */
    rope_tensor first = {(bf16 *)q, Hq, Hq / ROPE_HEADS + (Hq % ROPE_HEADS != 0)};
    rope_tensor second = {(bf16 *)k, Hkv, Hkv / ROPE_HEADS + (Hkv % ROPE_HEADS != 0)};
    const int v_groups = cache.k_cache ? second.groups : 0;
    if (first.groups + second.groups + v_groups > 65535) /* gridDim.y's limit */
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!q || (Hkv > 0 && !k) || !pos || !inv_freq)
        return cudaErrorInvalidValue;
    size_t pairs = (size_t)T * (size_t)(hd / 2);
    size_t blocks = (pairs + ROPE_THREADS - 1) / ROPE_THREADS;
    if (blocks > 0x7fffffffu)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)blocks, (unsigned)(first.groups + second.groups + v_groups));
    return kg_launch(rope_kernel, grid, ROPE_THREADS, 0, s, first, second, cache, pos, inv_freq, T,
                     hd, (float)sign);
}

extern "C" {

cudaError_t kg_rope(kg_bf16 *x, const int32_t *pos, const float *inv_freq, int T, int heads, int hd,
                    int sign, cudaStream_t s)
{
    return rope_launch(x, NULL, pos, inv_freq, T, heads, 0, hd, sign, rope_cache{}, s);
}

cudaError_t kg_rope_qk(kg_bf16 *q, kg_bf16 *k, const int32_t *pos, const float *inv_freq, int T,
                       int Hq, int Hkv, int hd, int sign, cudaStream_t s)
{
    if (Hkv <= 0)
        return cudaErrorInvalidValue;
    return rope_launch(q, k, pos, inv_freq, T, Hq, Hkv, hd, sign, rope_cache{}, s);
}

cudaError_t kg_rope_qk_kv_write(kg_bf16 *q, kg_bf16 *k, const int32_t *pos, const float *inv_freq,
                                int T, int Hq, int Hkv, int hd, const kg_kv_dest *dest,
                                cudaStream_t s)
{
    if (Hkv <= 0 || !dest || dest->n_slots <= 0 || dest->max_len <= 0)
        return cudaErrorInvalidValue;
    if (T > 0 && (!dest->k_cache || !dest->v_cache || !dest->v || !dest->slot))
        return cudaErrorInvalidValue;
    const rope_cache cache = {(bf16 *)dest->k_cache, (bf16 *)dest->v_cache,
                              (const bf16 *)dest->v, dest->slot,
                              dest->n_slots,         dest->max_len};
    return rope_launch(q, k, pos, inv_freq, T, Hq, Hkv, hd, 1, cache, s);
}

} /* extern "C" */
