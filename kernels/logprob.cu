/* logprob: the fused log-softmax over the vocabulary (see kernels.h).
 *
 * One block per token row. A single pass over the row keeps, per thread, the running statistics
 *   m = the largest logit seen, s = sum_j exp(z_j - m), b = sum_j exp(z_j - m) (z_j - m)
 * (rescaled whenever m grows), then the block merges them. From these
 *   logsumexp = m + log s,   entropy = -sum_j p_j log p_j = log s - b / s,
 * where both terms of the entropy are >= 0 (s >= 1, b <= 0): no cancellation. Everything is fp32
 * and nothing [T, V] is written except the backward's bf16 dlogits.
 *
 * The backward recomputes the row's statistics (the API passes no saved logsumexp) and then writes
 * dlogits in a second pass over the row: two reads and one write of [T, V_pad] bf16.
 *
 * target[t] lives on the device, so the launchers cannot check it: a row whose target is outside
 * [0, V) gets logp = NaN in the forward and dlogits = NaN over [0, V) in the backward (padding
 * columns still 0), so that a bad target shows up instead of silently training on garbage. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define LP_THREADS 512
#define LP_WARPS (LP_THREADS / 32)
#define LP_VEC 8 /* bf16 per 16-byte load */

typedef struct lp_stat {
    float m, s, b;
} lp_stat;

static __device__ float lp_nan(void)
{
    return __int_as_float(0x7fc00000);
}

static __device__ float lp_bf2f(kg_bf16 x)
{
    return __uint_as_float((uint32_t)x << 16);
}

/* exp(d) is 0 in fp32 for d < -104: clamping d there changes no product exp(d) * d, and keeps a
 * -inf logit (d = -inf, exp(d) = 0) from turning it into 0 * inf = NaN. */
static __device__ float lp_clamp(float d)
{
    return fmaxf(d, -200.f);
}

static __device__ lp_stat lp_empty(void)
{
    lp_stat st = {-INFINITY, 0.f, 0.f};
    return st;
}

/* the statistics of the union of two parts of a row */
static __device__ lp_stat lp_merge(lp_stat x, lp_stat y)
{
    float M = fmaxf(x.m, y.m);
    if (M == -INFINITY) /* both empty (or only -inf logits): nothing to add */
        return x;
    float cx = expf(x.m - M), cy = expf(y.m - M);
    lp_stat r;
    r.m = M;
    r.s = x.s * cx + y.s * cy;
    r.b = cx * (x.b + lp_clamp(x.m - M) * x.s) + cy * (y.b + lp_clamp(y.m - M) * y.s);
    return r;
}

/* adds N logits to a thread's statistics; rescales at most once per N values */
template <int N> static __device__ void lp_absorb(lp_stat *st, const float *z)
{
    float mx = z[0];
#pragma unroll
    for (int k = 1; k < N; k++)
        mx = fmaxf(mx, z[k]);
    if (mx == -INFINITY) /* all masked: they add nothing (and -inf - -inf would be NaN) */
        return;
    if (mx > st->m) {
        float c = expf(st->m - mx);
        st->b = c * (st->b + lp_clamp(st->m - mx) * st->s);
        st->s *= c;
        st->m = mx;
    }
    /* a NaN logit is skipped by fmaxf above but makes d, and so s, NaN here: it propagates */
#pragma unroll
    for (int k = 0; k < N; k++) {
        float d = z[k] - st->m;
        float e = expf(d);
        st->s += e;
        st->b = fmaf(e, lp_clamp(d), st->b);
    }
}

/* 8 bf16 from a 16-byte aligned address, widened exactly (bf16 is the top half of an fp32) */
static __device__ void lp_load8(float *z, const kg_bf16 *p)
{
    uint4 u = *(const uint4 *)p;
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        z[2 * k] = __uint_as_float(w[k] << 16);
        z[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}

static __device__ lp_stat lp_shfl_merge(lp_stat st, int offset)
{
    lp_stat o;
    o.m = __shfl_xor_sync(0xffffffffu, st.m, offset);
    o.s = __shfl_xor_sync(0xffffffffu, st.s, offset);
    o.b = __shfl_xor_sync(0xffffffffu, st.b, offset);
    return lp_merge(st, o);
}

/* the whole block's statistics, returned to every thread. Called once per kernel (its shared
 * memory is not reused), by every thread of the block. */
static __device__ lp_stat lp_block_reduce(lp_stat st)
{
    __shared__ lp_stat part[LP_WARPS];
    __shared__ lp_stat total;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int o = 16; o > 0; o >>= 1)
        st = lp_shfl_merge(st, o);
    if (lane == 0)
        part[warp] = st;
    __syncthreads();
    if (warp == 0) {
        st = lane < LP_WARPS ? part[lane] : lp_empty();
        for (int o = 16; o > 0; o >>= 1)
            st = lp_shfl_merge(st, o);
        if (lane == 0)
            total = st;
    }
    __syncthreads();
    return total;
}

/* statistics of row[0, V). vec: the row is 16-byte aligned and V_pad % 8 == 0, so the 8-wide
 * chunks covering [0, V) stay inside [0, V_pad); columns >= V inside a chunk are masked to -inf */
static __device__ lp_stat lp_row_stat(const kg_bf16 *row, int V, int vec)
{
    lp_stat st = lp_empty();
    if (vec) {
        int chunks = (V + LP_VEC - 1) / LP_VEC;
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            float z[LP_VEC];
            lp_load8(z, row + (size_t)c * LP_VEC);
#pragma unroll
            for (int k = 0; k < LP_VEC; k++)
                if (c * LP_VEC + k >= V)
                    z[k] = -INFINITY;
            lp_absorb<LP_VEC>(&st, z);
        }
    } else {
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float z = lp_bf2f(row[j]);
            lp_absorb<1>(&st, &z);
        }
    }
    return lp_block_reduce(st);
}

static __global__ void __launch_bounds__(LP_THREADS)
    lp_forward_kernel(float *logp, float *entropy, const kg_bf16 *logits, const int32_t *target,
                      int V, int V_pad, int vec)
{
    int t = blockIdx.x;
    const kg_bf16 *row = logits + (size_t)t * V_pad;
    lp_stat st = lp_row_stat(row, V, vec);
    if (threadIdx.x != 0)
        return;
    float ls = logf(st.s);
    if (entropy)
        entropy[t] = ls - st.b / st.s;
    if (logp) {
        int y = target[t];
        /* (z_y - m) - log s rather than z_y - lse: no rounding of a large lse */
        logp[t] = (y >= 0 && y < V) ? (lp_bf2f(row[y]) - st.m) - ls : lp_nan();
    }
}

/* d logits_j = w_logp (1[j == y] - p_j) - w_ent p_j (log p_j + H), with log p_j = (z_j - m) - ls */
static __device__ float lp_grad(float z, int j, int y, float m, float ls, float H, float wl,
                                float we)
{
    float lp = lp_clamp((z - m) - ls); /* p_j is 0 in fp32 below the clamp anyway */
    float p = expf(lp);
    float g = -p * fmaf(we, lp + H, wl);
    return j == y ? g + wl : g;
}

static __device__ uint32_t lp_pack2(float lo, float hi)
{
    uint32_t a = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
    uint32_t b = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
    return a | (b << 16);
}

static __global__ void __launch_bounds__(LP_THREADS)
    lp_backward_kernel(kg_bf16 *dlogits, const kg_bf16 *logits, const int32_t *target,
                       const float *w_logp, const float *w_ent, int V, int V_pad, int vec)
{
    int t = blockIdx.x;
    const kg_bf16 *row = logits + (size_t)t * V_pad;
    kg_bf16 *drow = dlogits + (size_t)t * V_pad;
    lp_stat st = lp_row_stat(row, V, vec);
    float ls = logf(st.s), H = ls - st.b / st.s, m = st.m;
    int y = target[t];
    float wl = w_logp[t], we = w_ent ? w_ent[t] : 0.f;
    int bad = y < 0 || y >= V;
    if (vec) {
        int chunks = V_pad / LP_VEC;
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            int j0 = c * LP_VEC;
            float z[LP_VEC], g[LP_VEC];
            lp_load8(z, row + j0);
#pragma unroll
            for (int k = 0; k < LP_VEC; k++) {
                int j = j0 + k;
                g[k] = j >= V ? 0.f : bad ? lp_nan() : lp_grad(z[k], j, y, m, ls, H, wl, we);
            }
            uint4 u;
            u.x = lp_pack2(g[0], g[1]);
            u.y = lp_pack2(g[2], g[3]);
            u.z = lp_pack2(g[4], g[5]);
            u.w = lp_pack2(g[6], g[7]);
            *(uint4 *)(drow + j0) = u;
        }
    } else {
        for (int j = threadIdx.x; j < V_pad; j += blockDim.x) {
            float g = j >= V ? 0.f
                      : bad  ? lp_nan()
                             : lp_grad(lp_bf2f(row[j]), j, y, m, ls, H, wl, we);
            drow[j] = __bfloat16_as_ushort(__float2bfloat16_rn(g));
        }
    }
}

static int lp_aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

extern "C" {

cudaError_t kg_logprob_forward(float *logp, float *entropy, const kg_bf16 *logits,
                               const int32_t *target, int T, int V, int V_pad, cudaStream_t s)
{
    if (T < 0 || V <= 0 || V_pad < V || !logits || (logp && !target))
        return cudaErrorInvalidValue;
    if (T == 0 || (!logp && !entropy))
        return cudaSuccess;
    int vec = V_pad % LP_VEC == 0 && lp_aligned16(logits);
    lp_forward_kernel<<<T, LP_THREADS, 0, s>>>(logp, entropy, logits, target, V, V_pad, vec);
    return cudaGetLastError();
}

cudaError_t kg_logprob_backward(kg_bf16 *dlogits, const kg_bf16 *logits, const int32_t *target,
                                const float *w_logp, const float *w_ent, int T, int V, int V_pad,
                                cudaStream_t s)
{
    if (T < 0 || V <= 0 || V_pad < V || !dlogits || !logits || !target || !w_logp)
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    int vec = V_pad % LP_VEC == 0 && lp_aligned16(logits) && lp_aligned16(dlogits);
    lp_backward_kernel<<<T, LP_THREADS, 0, s>>>(dlogits, logits, target, w_logp, w_ent, V, V_pad,
                                                vec);
    return cudaGetLastError();
}

} /* extern "C" */
