/* attention.cu: causal GQA attention over packed sequences, flash style (see kernels.h).
 *
 * Token t of query head h attends to keys j with doc_start[t] <= j <= t of kv head
 * h / (Hq / Hkv). Nothing [T, T] ever reaches global memory: the forward walks K/V tiles with an
 * online softmax (running max and sum in fp32) and keeps lse [Hq, T]; the backward recomputes
 * the probabilities tile by tile from lse.
 *
 * First version, correctness before speed: SIMT fp32 math on bf16 loads, tiles staged in shared
 * memory as fp32. Tensor cores (mma / wgmma on bf16 tiles), vectorised 16-byte loads, cp.async
 * double buffering and packing the Hq/Hkv query heads of a group into one block are left for
 * later.
 *
 * Tiling: 64 queries x 64 keys per tile, 256 threads as a 16 x 16 grid (ty = tid / 16,
 * tx = tid % 16); a thread owns rows ty + 16 i (i < 4) and columns tx + 16 j of every tile it
 * computes, so a row's 16 owners are one half-warp (row reductions are 4 shuffles). Shared rows
 * are padded by one float so that the 16 columns a half-warp reads fall in distinct banks.
 *
 * Documents are contiguous runs of tokens (doc_start is non-decreasing, doc_start[t] <= t): a
 * query tile needs only the keys in [min doc_start of its queries, its last query], and the
 * backward stops walking query tiles at the first one whose queries all start after the key
 * tile (every later one does too). The mask itself is applied element by element. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define ATT_BQ 64       /* queries per tile */
#define ATT_BK 64       /* keys per tile */
#define ATT_THREADS 256 /* 16 x 16 threads, 4 x 4 scores each */
#define ATT_LDP (ATT_BK + 1)
#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2 0.6931471805599453f

/* max / sum over the 16 lanes of a half-warp (every lane of the warp calls it) */
static __device__ __forceinline__ float att_hw_max(float x)
{
    for (int o = 8; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

static __device__ __forceinline__ float att_hw_sum(float x)
{
    for (int o = 8; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* rows [t0, t0 + 64) of head h of a [T, H, HD] tensor into a padded fp32 tile; rows >= T are 0 */
template <int HD>
static __device__ __forceinline__ void att_load_tile(float *dst, const __nv_bfloat16 *src, int t0,
                                                     int T, int H, int h)
{
    for (int idx = threadIdx.x; idx < 64 * HD; idx += ATT_THREADS) {
        int r = idx / HD, d = idx % HD, t = t0 + r;
        dst[r * (HD + 1) + d] = t < T ? __bfloat162float(src[((size_t)t * H + h) * HD + d]) : 0.f;
    }
}

/* may key j be seen by query t (whose document starts at ds)? */
static __device__ __forceinline__ bool att_visible(int t, int ds, int j, int T)
{
    return t < T && j <= t && j >= ds;
}

template <int HD> static constexpr size_t att_fwd_smem()
{
    return (size_t)(3 * 64 * (HD + 1) + ATT_BQ * ATT_LDP) * sizeof(float) + ATT_BQ * sizeof(int);
}

template <int HD> static constexpr size_t att_bwd_smem()
{
    return (size_t)(4 * 64 * (HD + 1) + 2 * ATT_BQ * ATT_LDP + 2 * ATT_BQ) * sizeof(float) +
           ATT_BQ * sizeof(int);
}

/* Forward: block (tile, h) computes queries [q0, q0 + 64) of head h. Scores are kept in base 2
 * (scale_log2 = scale * log2 e) so that exp2f does the exponentials. */
template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_fwd_kernel(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                   const __nv_bfloat16 *v, const int32_t *doc_start, int T, int Hq, int Hkv,
                   float scale_log2)
{
    constexpr int LD = HD + 1;
    constexpr int NJ = HD / 16; /* output columns per thread */
    extern __shared__ float att_smem[];
    float *Qs = att_smem;                      /* [BQ][LD] */
    float *Ks = Qs + ATT_BQ * LD;              /* [BK][LD] */
    float *Vs = Ks + ATT_BK * LD;              /* [BK][LD] */
    float *Ps = Vs + ATT_BK * LD;              /* [BQ][LDP] probabilities of the current tile */
    int *dss = (int *)(Ps + ATT_BQ * ATT_LDP); /* [BQ] doc_start of the tile's queries */

    const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
    /* causal: later tiles have the most keys, so they are scheduled first */
    const int q0 = (int)(gridDim.x - 1 - blockIdx.x) * ATT_BQ;
    const int h = blockIdx.y;
    const int hk = h / (Hq / Hkv);
    const int q_end = min(q0 + ATT_BQ, T);

    for (int r = tid; r < ATT_BQ; r += ATT_THREADS)
        dss[r] = q0 + r < T ? doc_start[q0 + r] : INT_MAX;
    att_load_tile<HD>(Qs, q, q0, T, Hq, h);
    __syncthreads();

    /* every thread computes the same bound from shared memory: the loop below is uniform */
    int kv_lo = INT_MAX;
    for (int r = 0; r < ATT_BQ; r++)
        kv_lo = min(kv_lo, dss[r]);
    kv_lo = max(kv_lo, 0);

    int row_t[4], row_ds[4];
    float m[4], l[4], o[4][NJ];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        row_t[i] = q0 + ty + 16 * i;
        row_ds[i] = dss[ty + 16 * i];
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int j = 0; j < NJ; j++)
            o[i][j] = 0.f;
    }

    for (int k0 = kv_lo; k0 < q_end; k0 += ATT_BK) {
        att_load_tile<HD>(Ks, k, k0, T, Hkv, hk);
        att_load_tile<HD>(Vs, v, k0, T, Hkv, hk);
        __syncthreads();

        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                s[i][j] = 0.f;
#pragma unroll 4
        for (int d = 0; d < HD; d++) {
            float qa[4], kb[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                qa[i] = Qs[(ty + 16 * i) * LD + d];
#pragma unroll
            for (int j = 0; j < 4; j++)
                kb[j] = Ks[(tx + 16 * j) * LD + d];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    s[i][j] = fmaf(qa[i], kb[j], s[i][j]);
        }

        /* mask, then the online softmax update of each row */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                bool ok = att_visible(row_t[i], row_ds[i], k0 + tx + 16 * j, T);
                s[i][j] = ok ? s[i][j] * scale_log2 : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            mx = att_hw_max(mx);
            float m_new = fmaxf(m[i], mx);
            /* a row that has seen no key yet keeps max -inf: subtract 0 instead (no inf - inf) */
            float base = m_new == -INFINITY ? 0.f : m_new;
            float alpha = exp2f(m[i] - base);
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = exp2f(s[i][j] - base); /* masked: exp2(-inf) = 0 */
                Ps[(ty + 16 * i) * ATT_LDP + tx + 16 * j] = p;
                sum += p;
            }
            sum = att_hw_sum(sum);
            l[i] = l[i] * alpha + sum;
            m[i] = m_new;
#pragma unroll
            for (int j = 0; j < NJ; j++)
                o[i][j] *= alpha;
        }
        __syncthreads();

        /* o += P V */
#pragma unroll 4
        for (int c = 0; c < ATT_BK; c++) {
            float pa[4], vb[NJ];
#pragma unroll
            for (int i = 0; i < 4; i++)
                pa[i] = Ps[(ty + 16 * i) * ATT_LDP + c];
#pragma unroll
            for (int j = 0; j < NJ; j++)
                vb[j] = Vs[c * LD + tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < NJ; j++)
                    o[i][j] = fmaf(pa[i], vb[j], o[i][j]);
        }
        __syncthreads(); /* Ks, Vs, Ps are overwritten by the next tile */
    }

#pragma unroll
    for (int i = 0; i < 4; i++) {
        int t = row_t[i];
        if (t >= T)
            continue;
        /* l = 0 only if no key is visible (doc_start[t] > t: not a valid input) */
        float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
        __nv_bfloat16 *orow = out + ((size_t)t * Hq + h) * HD;
#pragma unroll
        for (int j = 0; j < NJ; j++)
            orow[tx + 16 * j] = __float2bfloat16(o[i][j] * inv);
        if (tx == 0)
            lse[(size_t)h * T + t] = l[i] > 0.f ? (m[i] + log2f(l[i])) * ATT_LN2 : -INFINITY;
    }
}

/* Backward, step 1: Dd[h, t] = sum_d dout[t, h, d] * out[t, h, d], one warp per (t, h). */
static __global__ void att_bwd_delta_kernel(float *Dd, const __nv_bfloat16 *dout,
                                            const __nv_bfloat16 *out, int T, int Hq, int hd)
{
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= (long long)T * Hq) /* the whole warp leaves together */
        return;
    const int t = (int)(row / Hq), h = (int)(row % Hq);
    const size_t base = (size_t)row * hd;
    float acc = 0.f;
    for (int d = lane; d < hd; d += 32)
        acc = fmaf(__bfloat162float(dout[base + d]), __bfloat162float(out[base + d]), acc);
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0)
        Dd[(size_t)h * T + t] = acc;
}

/* Backward, step 2: block (key tile, kv head) owns keys [k0, k0 + 64) of kv head hk and walks
 * every query tile that can see them, for every query head of the group: dK and dV accumulate
 * in registers (no other block writes them: no race, no atomics), dQ goes to the fp32 scratch
 * dq_acc with atomics (many key tiles add into one query row).
 *   P = exp(S - lse), dV += P^T dO, dP = dO V^T, dS = P (dP - D), dK += scale dS^T Q,
 *   dQ += scale dS K. */
template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS, HD == 64 ? 2 : 1)
    att_bwd_kernel(__nv_bfloat16 *dk, __nv_bfloat16 *dv, float *dq_acc, const __nv_bfloat16 *dout,
                   const float *lse, const float *Dd, const __nv_bfloat16 *q,
                   const __nv_bfloat16 *k, const __nv_bfloat16 *v, const int32_t *doc_start, int T,
                   int Hq, int Hkv, float scale, float scale_log2)
{
    constexpr int LD = HD + 1;
    constexpr int NJ = HD / 16;
    extern __shared__ float att_smem[];
    float *Ks = att_smem;                  /* [BK][LD] */
    float *Vs = Ks + ATT_BK * LD;          /* [BK][LD] */
    float *Qs = Vs + ATT_BK * LD;          /* [BQ][LD] */
    float *dOs = Qs + ATT_BQ * LD;         /* [BQ][LD] */
    float *Ps = dOs + ATT_BQ * LD;         /* [BQ][LDP] */
    float *dSs = Ps + ATT_BQ * ATT_LDP;    /* [BQ][LDP] */
    float *lse_s = dSs + ATT_BQ * ATT_LDP; /* [BQ] lse in base 2 */
    float *D_s = lse_s + ATT_BQ;           /* [BQ] */
    int *dss = (int *)(D_s + ATT_BQ);      /* [BQ] */

    const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
    const int k0 = blockIdx.x * ATT_BK;
    const int hk = blockIdx.y;
    const int group = Hq / Hkv;
    const int k_last = min(k0 + ATT_BK, T) - 1;

    att_load_tile<HD>(Ks, k, k0, T, Hkv, hk);
    att_load_tile<HD>(Vs, v, k0, T, Hkv, hk);

    float dkr[4][NJ], dvr[4][NJ]; /* keys k0 + ty + 16 i, dims tx + 16 j */
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            dkr[i][j] = 0.f;
            dvr[i][j] = 0.f;
        }

    /* queries before k0 see none of these keys */
    for (int q0 = k0; q0 < T; q0 += ATT_BQ) {
        __syncthreads(); /* the previous tile's readers of dss are done */
        for (int r = tid; r < ATT_BQ; r += ATT_THREADS)
            dss[r] = q0 + r < T ? doc_start[q0 + r] : INT_MAX;
        __syncthreads();
        int ds_min = INT_MAX; /* the same in every thread: the break is uniform */
        for (int r = 0; r < ATT_BQ; r++)
            ds_min = min(ds_min, dss[r]);
        if (ds_min > k_last) /* these queries and all later ones are in later documents */
            break;
        int row_t[4], row_ds[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            row_t[i] = q0 + ty + 16 * i;
            row_ds[i] = dss[ty + 16 * i];
        }

        for (int hg = 0; hg < group; hg++) {
            const int h = hk * group + hg;
            att_load_tile<HD>(Qs, q, q0, T, Hq, h);
            att_load_tile<HD>(dOs, dout, q0, T, Hq, h);
            for (int r = tid; r < ATT_BQ; r += ATT_THREADS) {
                int t = q0 + r;
                lse_s[r] = t < T ? lse[(size_t)h * T + t] * ATT_LOG2E : 0.f;
                D_s[r] = t < T ? Dd[(size_t)h * T + t] : 0.f;
            }
            __syncthreads();

            /* S = Q K^T and dP = dO V^T: rows ty + 16 i (queries), columns tx + 16 j (keys) */
            float s[4][4], dp[4][4];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    s[i][j] = 0.f;
                    dp[i][j] = 0.f;
                }
#pragma unroll 4
            for (int d = 0; d < HD; d++) {
                float qa[4], oa[4], kb[4], vb[4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    qa[i] = Qs[(ty + 16 * i) * LD + d];
                    oa[i] = dOs[(ty + 16 * i) * LD + d];
                }
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    kb[j] = Ks[(tx + 16 * j) * LD + d];
                    vb[j] = Vs[(tx + 16 * j) * LD + d];
                }
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        s[i][j] = fmaf(qa[i], kb[j], s[i][j]);
                        dp[i][j] = fmaf(oa[i], vb[j], dp[i][j]);
                    }
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int r = ty + 16 * i;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int c = tx + 16 * j;
                    bool ok = att_visible(row_t[i], row_ds[i], k0 + c, T);
                    /* masked entries are exactly 0 (never exp of something from lse = -inf) */
                    float p = ok ? exp2f(s[i][j] * scale_log2 - lse_s[r]) : 0.f;
                    Ps[r * ATT_LDP + c] = p;
                    dSs[r * ATT_LDP + c] = p * (dp[i][j] - D_s[r]);
                }
            }
            __syncthreads();

            /* dV += P^T dO, dK += dS^T Q: keys ty + 16 i, dims tx + 16 j */
#pragma unroll 4
            for (int r = 0; r < ATT_BQ; r++) {
                float pa[4], sa[4], ob[NJ], qb[NJ];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    pa[i] = Ps[r * ATT_LDP + ty + 16 * i];
                    sa[i] = dSs[r * ATT_LDP + ty + 16 * i];
                }
#pragma unroll
                for (int j = 0; j < NJ; j++) {
                    ob[j] = dOs[r * LD + tx + 16 * j];
                    qb[j] = Qs[r * LD + tx + 16 * j];
                }
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < NJ; j++) {
                        dvr[i][j] = fmaf(pa[i], ob[j], dvr[i][j]);
                        dkr[i][j] = fmaf(sa[i], qb[j], dkr[i][j]);
                    }
            }

            /* dQ += scale dS K: queries ty + 16 i, dims tx + 16 j, added into the scratch */
            float dqr[4][NJ];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < NJ; j++)
                    dqr[i][j] = 0.f;
#pragma unroll 4
            for (int c = 0; c < ATT_BK; c++) {
                float sa[4], kb[NJ];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    sa[i] = dSs[(ty + 16 * i) * ATT_LDP + c];
#pragma unroll
                for (int j = 0; j < NJ; j++)
                    kb[j] = Ks[c * LD + tx + 16 * j];
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < NJ; j++)
                        dqr[i][j] = fmaf(sa[i], kb[j], dqr[i][j]);
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int t = row_t[i];
                if (t >= T)
                    continue;
                float *dst = dq_acc + ((size_t)t * Hq + h) * HD;
#pragma unroll
                for (int j = 0; j < NJ; j++)
                    atomicAdd(dst + tx + 16 * j, dqr[i][j] * scale);
            }
            __syncthreads(); /* Qs, dOs, Ps, dSs, lse_s, D_s are overwritten next */
        }
    }

#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int j_tok = k0 + ty + 16 * i;
        if (j_tok >= T)
            continue;
        const size_t base = ((size_t)j_tok * Hkv + hk) * HD;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            dk[base + tx + 16 * j] = __float2bfloat16(dkr[i][j] * scale);
            dv[base + tx + 16 * j] = __float2bfloat16(dvr[i][j]);
        }
    }
}

/* Backward, step 3: dq = bf16(dq_acc) */
static __global__ void att_f32_to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}

static bool att_shape_ok(int T, int Hq, int Hkv, int hd)
{
    if (T < 0 || Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0 || (hd != 64 && hd != 128))
        return false;
    return Hq <= 65535; /* gridDim.y of the forward */
}

template <int HD>
static cudaError_t att_forward_launch(kg_bf16 *out, float *lse, const kg_bf16 *q, const kg_bf16 *k,
                                      const kg_bf16 *v, const int32_t *doc_start, int T, int Hq,
                                      int Hkv, float scale, cudaStream_t s)
{
    const size_t smem = att_fwd_smem<HD>();
    cudaError_t e = cudaFuncSetAttribute(att_fwd_kernel<HD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    dim3 grid((unsigned)((T + ATT_BQ - 1) / ATT_BQ), (unsigned)Hq);
    att_fwd_kernel<HD><<<grid, ATT_THREADS, smem, s>>>(
        (__nv_bfloat16 *)out, lse, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k,
        (const __nv_bfloat16 *)v, doc_start, T, Hq, Hkv, scale * ATT_LOG2E);
    return cudaGetLastError();
}

template <int HD>
static cudaError_t att_bwd_main_launch(kg_bf16 *dk, kg_bf16 *dv, float *dq_acc, const kg_bf16 *dout,
                                       const float *lse, const float *Dd, const kg_bf16 *q,
                                       const kg_bf16 *k, const kg_bf16 *v, const int32_t *doc_start,
                                       int T, int Hq, int Hkv, float scale, cudaStream_t s)
{
    const size_t smem = att_bwd_smem<HD>();
    cudaError_t e = cudaFuncSetAttribute(att_bwd_kernel<HD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    dim3 grid((unsigned)((T + ATT_BK - 1) / ATT_BK), (unsigned)Hkv);
    att_bwd_kernel<HD><<<grid, ATT_THREADS, smem, s>>>(
        (__nv_bfloat16 *)dk, (__nv_bfloat16 *)dv, dq_acc, (const __nv_bfloat16 *)dout, lse, Dd,
        (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, doc_start, T,
        Hq, Hkv, scale, scale * ATT_LOG2E);
    return cudaGetLastError();
}

extern "C" {

cudaError_t kg_attention_forward(kg_bf16 *out, float *lse, const kg_bf16 *q, const kg_bf16 *k,
                                 const kg_bf16 *v, const int32_t *doc_start, int T, int Hq, int Hkv,
                                 int hd, float scale, cudaStream_t s)
{
    if (!att_shape_ok(T, Hq, Hkv, hd))
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!out || !lse || !q || !k || !v || !doc_start)
        return cudaErrorInvalidValue;
    if (hd == 64)
        return att_forward_launch<64>(out, lse, q, k, v, doc_start, T, Hq, Hkv, scale, s);
    return att_forward_launch<128>(out, lse, q, k, v, doc_start, T, Hq, Hkv, scale, s);
}

cudaError_t kg_attention_backward(kg_bf16 *dq, kg_bf16 *dk, kg_bf16 *dv, const kg_bf16 *dout,
                                  const kg_bf16 *out, const float *lse, const kg_bf16 *q,
                                  const kg_bf16 *k, const kg_bf16 *v, const int32_t *doc_start,
                                  int T, int Hq, int Hkv, int hd, float scale, cudaStream_t s)
{
    if (!att_shape_ok(T, Hq, Hkv, hd))
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!dq || !dk || !dv || !dout || !out || !lse || !q || !k || !v || !doc_start)
        return cudaErrorInvalidValue;

    const size_t nq = (size_t)T * Hq * hd;
    float *dq_acc = NULL, *Dd = NULL;
    cudaError_t e = cudaMallocAsync((void **)&dq_acc, nq * sizeof(float), s);
    if (e == cudaSuccess)
        e = cudaMallocAsync((void **)&Dd, (size_t)T * Hq * sizeof(float), s);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(dq_acc, 0, nq * sizeof(float), s);
    if (e == cudaSuccess) {
        const int warps = 8; /* rows (t, h) per block of the delta kernel */
        long long rows = (long long)T * Hq;
        att_bwd_delta_kernel<<<(unsigned)((rows + warps - 1) / warps), warps * 32, 0, s>>>(
            Dd, (const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)out, T, Hq, hd);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) {
        if (hd == 64)
            e = att_bwd_main_launch<64>(dk, dv, dq_acc, dout, lse, Dd, q, k, v, doc_start, T, Hq,
                                        Hkv, scale, s);
        else
            e = att_bwd_main_launch<128>(dk, dv, dq_acc, dout, lse, Dd, q, k, v, doc_start, T, Hq,
                                         Hkv, scale, s);
    }
    if (e == cudaSuccess) {
        size_t blocks = (nq + 255) / 256;
        if (blocks > 8192)
            blocks = 8192; /* grid-stride loop does the rest */
        att_f32_to_bf16_kernel<<<(unsigned)blocks, 256, 0, s>>>((__nv_bfloat16 *)dq, dq_acc, nq);
        e = cudaGetLastError();
    }
    /* freed on the stream after the kernels that use them, whatever happened above */
    if (Dd)
        cudaFreeAsync(Dd, s);
    if (dq_acc)
        cudaFreeAsync(dq_acc, s);
    return e;
}

} /* extern "C" */
