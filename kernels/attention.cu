/* attention.cu: causal GQA attention over packed sequences, flash style (see kernels.h).
 *
 * Token t of query head h attends to keys j with doc_start[t] <= j <= t of kv head
 * h / (Hq / Hkv). Nothing [T, T] ever reaches global memory: the forward walks K/V tiles with an
 * online softmax (running max and sum in fp32) and keeps lse [Hq, T]; the backward recomputes
 * the probabilities tile by tile from lse.
 *
 * Tensor cores: every product of tiles is mma.sync m16n8k16 (bf16 in, fp32 accumulate), the
 * FlashAttention-2 scheme. The first version did the same math in SIMT fp32 and ran at 8-10
 * TFLOP/s on the H200, three quarters of a training step at the Qwen2.5-0.5B shape (issue 8).
 * Tiles are staged in shared memory as bf16 rows padded by 8 elements (16 bytes), so that the 8
 * row addresses of an ldmatrix fall in distinct bank groups. A warp owns 16 rows of each product;
 * the fragment layouts (PTX ISA, "mma.m16n8k16"): with g = lane / 4 and c = 2 (lane % 4),
 *   A (16 x 16, row-major): a0 = A[g][c, c+1], a1 = A[g+8][c, c+1], a2 = A[g][c+8, c+9],
 *                           a3 = A[g+8][c+8, c+9];
 *   B (16 x 8, k x n):      b0 = B[c, c+1][g], b1 = B[c+8, c+9][g];
 *   C (16 x 8, fp32):       C[g][c], C[g][c+1], C[g+8][c], C[g+8][c+1].
 * So an accumulator pair of adjacent n-tiles is, once packed to bf16, the A fragment of the next
 * product (P = softmax(S) feeds P V without leaving registers). ldmatrix loads an operand stored
 * with its k dimension contiguous; ldmatrix .trans one stored with n contiguous (V in P V, dO and
 * Q in the backward's dV and dK, K and dS^T in dQ).
 *
 * Precision: scores, the softmax statistics, every accumulator and dQ's atomics are fp32; the
 * probabilities (forward) and P and dS (backward) are rounded to bf16 as the next product's
 * operand, as FlashAttention does.
 *
 * Documents are contiguous runs of tokens (doc_start is non-decreasing, doc_start[t] <= t): a
 * query tile needs only the keys in [min doc_start of its queries, its last query], and the
 * backward stops walking query tiles at the first one whose queries all start after the key
 * tile (every later one does too). The mask is applied element by element, only on the tiles
 * that cross the diagonal, a document boundary or the end of the sequence. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define ATT_THREADS 128 /* 4 warps, 16 rows of each tile product each */
#define ATT_BQ 64       /* forward: queries per block */
#define ATT_BK 64       /* keys per tile (the backward's block owns one key tile) */
#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2 0.6931471805599453f

/* the backward's queries per tile: 32 for hd 128 keeps its accumulators in registers */
template <int HD> struct att_bwd_cfg {
    static constexpr int BQ = HD == 64 ? 64 : 32;
};

static __device__ __forceinline__ uint32_t att_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* four 8 x 8 b16 matrices; lane l gives the address of row l % 8 of matrix l / 8 */
static __device__ __forceinline__ void att_ldsm4(uint32_t r[4], const __nv_bfloat16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(att_smem_addr(p))
                 : "memory");
}

/* the same, each matrix transposed on the way */
static __device__ __forceinline__ void att_ldsm4_t(uint32_t r[4], const __nv_bfloat16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(att_smem_addr(p))
                 : "memory");
}

/* c += A B for one 16 x 8 x 16 step */
static __device__ __forceinline__ void att_mma(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* two floats as a bf16 pair, the first in the low half (the lower column) */
static __device__ __forceinline__ uint32_t att_pack(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* the A fragment of rows [0, 16) x columns [16 kk, 16 kk + 16) from the accumulators of two
 * adjacent 8-column n-tiles (acc[2 kk], acc[2 kk + 1]) */
static __device__ __forceinline__ void att_acc_to_a(uint32_t a[4], const float lo[4],
                                                    const float hi[4])
{
    a[0] = att_pack(lo[0], lo[1]);
    a[1] = att_pack(lo[2], lo[3]);
    a[2] = att_pack(hi[0], hi[1]);
    a[3] = att_pack(hi[2], hi[3]);
}

/* Offsets (in elements, from a tile's [row 0][column 0]) of this lane's ldmatrix row address:
 * att_a_off: a 16 x 16 A operand stored row-major (rows = the product's rows);
 * att_b_off: two 8-wide n-tiles x 16 k, stored n-major (rows = n, k contiguous): r0, r1 are the
 *            first n-tile's b0, b1 and r2, r3 the second's;
 * att_bt_off: the same operand stored k-major (rows = k, n contiguous), for ldmatrix .trans. */
static __device__ __forceinline__ int att_a_off(int lane, int ld)
{
    return (lane & 15) * ld + (lane >> 4) * 8;
}

static __device__ __forceinline__ int att_b_off(int lane, int ld)
{
    return ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8;
}

static __device__ __forceinline__ int att_bt_off(int lane, int ld)
{
    return ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
}

/* Rows [t0, t0 + rows) of head h of a [T, H, HD] tensor into a bf16 tile with row stride
 * HD + 8; rows >= T are zeros (their products must be finite: they are masked, not skipped).
 * vec: every pointer is 16-byte aligned, so rows move as 16-byte vectors. */
template <int HD>
static __device__ __forceinline__ void att_stage(__nv_bfloat16 *dst, const __nv_bfloat16 *src,
                                                 int t0, int rows, int T, int H, int h, bool vec)
{
    constexpr int LDS = HD + 8;
    if (vec) {
        constexpr int C8 = HD / 8;
        for (int i = threadIdx.x; i < rows * C8; i += ATT_THREADS) {
            const int r = i / C8, c = i % C8, t = t0 + r;
            uint4 val = make_uint4(0, 0, 0, 0);
            if (t < T)
                val = *(const uint4 *)(src + ((size_t)t * H + h) * HD + c * 8);
            *(uint4 *)(dst + r * LDS + c * 8) = val;
        }
        return;
    }
    for (int i = threadIdx.x; i < rows * HD; i += ATT_THREADS) {
        const int r = i / HD, c = i % HD, t = t0 + r;
        dst[r * LDS + c] = t < T ? src[((size_t)t * H + h) * HD + c] : __float2bfloat16(0.f);
    }
}

/* may key j be seen by query t (whose document starts at ds)? */
static __device__ __forceinline__ bool att_visible(int t, int ds, int j, int T)
{
    return t < T && j <= t && j >= ds;
}

/* min and max doc_start over the valid rows of a tile's dss[n] (INT_MAX past T), the same in
 * every thread so that the loops they bound are uniform */
static __device__ __forceinline__ void att_ds_range(const int *dss, int n, int *lo, int *hi)
{
    int a = INT_MAX, b = 0;
    for (int r = 0; r < n; r++) {
        a = min(a, dss[r]);
        if (dss[r] != INT_MAX)
            b = max(b, dss[r]);
    }
    *lo = a;
    *hi = b;
}

template <int HD> static constexpr size_t att_fwd_smem()
{
    return (size_t)(ATT_BQ + 2 * ATT_BK) * (HD + 8) * sizeof(__nv_bfloat16) + ATT_BQ * sizeof(int);
}

template <int HD> static constexpr size_t att_bwd_smem()
{
    constexpr int BQ = att_bwd_cfg<HD>::BQ;
    return (size_t)(2 * ATT_BK + 2 * BQ) * (HD + 8) * sizeof(__nv_bfloat16) +
           (size_t)ATT_BK * (BQ + 8) * sizeof(__nv_bfloat16) + 2 * BQ * sizeof(float) +
           BQ * sizeof(int);
}

/* One key tile [k0, k0 + 64) of the forward for this warp's 16 rows: S = Q K^T, the online
 * softmax update of m, l (per thread) and o, then o += P V. masked: some (row, key) pair of the
 * tile is not visible (then each is checked; rows outside the pass, !in_seg, see nothing). */
template <int HD>
static __device__ __forceinline__ void
att_fwd_tile(float (&o)[HD / 8][4], float (&m)[2], float (&l)[2], const uint32_t (&qf)[HD / 16][4],
             __nv_bfloat16 *Ks, __nv_bfloat16 *Vs, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
             int k0, int T, int Hkv, int hk, const int (&t_row)[2], const int (&ds_row)[2],
             const bool (&in_seg)[2], bool masked, float scale_log2, bool vec)
{
    constexpr int LDS = HD + 8;
    constexpr int KS = HD / 16;
    constexpr int NO = HD / 8;
    constexpr int NS = ATT_BK / 8;
    const int lane = threadIdx.x & 31, c = 2 * (lane & 3);
    __syncthreads(); /* the previous tile's readers are done */
    att_stage<HD>(Ks, k, k0, ATT_BK, T, Hkv, hk, vec);
    att_stage<HD>(Vs, v, k0, ATT_BK, T, Hkv, hk, vec);
    __syncthreads();

    float s[NS][4];
#pragma unroll
    for (int n = 0; n < NS; n++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            s[n][i] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
#pragma unroll
        for (int np = 0; np < NS / 2; np++) {
            uint32_t b[4];
            att_ldsm4(b, Ks + np * 16 * LDS + att_b_off(lane, LDS) + kk * 16);
            att_mma(s[2 * np], qf[kk], b[0], b[1]);
            att_mma(s[2 * np + 1], qf[kk], b[2], b[3]);
        }

#pragma unroll
    for (int ri = 0; ri < 2; ri++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float x = s[n][2 * ri + e] * scale_log2;
                if (masked &&
                    !(in_seg[ri] && att_visible(t_row[ri], ds_row[ri], k0 + n * 8 + c + e, T)))
                    x = -INFINITY;
                s[n][2 * ri + e] = x;
                mx = fmaxf(mx, x);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[ri], mx);
        /* a row that has seen no key yet keeps max -inf: subtract 0 instead (no inf - inf) */
        const float base = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = exp2f(m[ri] - base);
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float p = exp2f(s[n][2 * ri + e] - base); /* masked: exp2(-inf) = 0 */
                s[n][2 * ri + e] = p;
                sum += p;
            }
        l[ri] = l[ri] * alpha + sum;
        m[ri] = m_new;
#pragma unroll
        for (int n = 0; n < NO; n++) {
            o[n][2 * ri] *= alpha;
            o[n][2 * ri + 1] *= alpha;
        }
    }

    /* o += P V: P's accumulators are the A fragments, V is stored k(ey)-major */
#pragma unroll
    for (int kk = 0; kk < NS / 2; kk++) {
        uint32_t a[4];
        att_acc_to_a(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int dp = 0; dp < NO / 2; dp++) {
            uint32_t b[4];
            att_ldsm4_t(b, Vs + kk * 16 * LDS + att_bt_off(lane, LDS) + dp * 16);
            att_mma(o[2 * dp], a, b[0], b[1]);
            att_mma(o[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

/* Forward: block (tile, h) computes queries [q0, q0 + 64) of head h, warp w its rows
 * [16 w, 16 w + 16); each thread holds two rows (g and g + 8) of every accumulator. Scores are
 * kept in base 2 (scale_log2 = scale * log2 e) so that exp2f does the exponentials. The row sum
 * l is kept per thread (its 16 of the 64 columns) and summed over the quad at the end: alpha is
 * the same in the four threads of a row, since the max is. */
template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_fwd_kernel(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                   const __nv_bfloat16 *v, const int32_t *doc_start, int T, int Hq, int Hkv,
                   float scale_log2, bool vec)
{
    constexpr int LDS = HD + 8;
    constexpr int KS = HD / 16; /* k-steps over the head dimension */
    constexpr int NO = HD / 8;  /* the output's 8-column n-tiles */
    extern __shared__ __align__(16) unsigned char att_raw[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)att_raw; /* [BQ][LDS] */
    __nv_bfloat16 *Ks = Qs + ATT_BQ * LDS;        /* [BK][LDS] */
    __nv_bfloat16 *Vs = Ks + ATT_BK * LDS;        /* [BK][LDS] */
    int *dss = (int *)(Vs + ATT_BK * LDS);        /* [BQ] doc_start of the tile's queries */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* causal: later tiles have the most keys, so they are scheduled first */
    const int q0 = (int)(gridDim.x - 1 - blockIdx.x) * ATT_BQ;
    const int h = blockIdx.y;
    const int hk = h / (Hq / Hkv);
    const int q_end = min(q0 + ATT_BQ, T);

    for (int r = threadIdx.x; r < ATT_BQ; r += ATT_THREADS)
        dss[r] = q0 + r < T ? doc_start[q0 + r] : INT_MAX;
    att_stage<HD>(Qs, q, q0, ATT_BQ, T, Hq, h, vec);
    __syncthreads();

    const int g = lane >> 2, c = 2 * (lane & 3);
    const int row0 = warp * 16 + g;
    const int t_row[2] = {q0 + row0, q0 + row0 + 8};
    const int ds_row[2] = {dss[row0], dss[row0 + 8]};
    uint32_t qf[KS][4];
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
        att_ldsm4(qf[kk], Qs + warp * 16 * LDS + att_a_off(lane, LDS) + kk * 16);

    float o[NO][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NO; n++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            o[n][i] = 0.f;

    /* One pass per document the tile's rows belong to (usually one; two or more where a document
     * ends inside the tile), its key tiles starting at the document's first token, and only its
     * rows updated. So a row's result depends on its document alone, not on where the document
     * sits in the packed batch (the bf16 rounding of P follows the key tiles and the running
     * max): the same prompt gives bitwise the same prefill in any slot of a batch. A row outside
     * the pass sees only masked keys, which leave its m, l and o exactly as they were. */
    const int n_rows = q_end - q0;
    for (int seg_lo = 0, seg_hi; seg_lo < n_rows; seg_lo = seg_hi) {
        const int ds = max(dss[seg_lo], 0); /* the same in every thread: uniform loops */
        for (seg_hi = seg_lo + 1; seg_hi < n_rows && dss[seg_hi] == dss[seg_lo]; seg_hi++)
            ;
        const bool in_seg[2] = {row0 >= seg_lo && row0 < seg_hi,
                                row0 + 8 >= seg_lo && row0 + 8 < seg_hi};
        const bool whole_tile = seg_lo == 0 && seg_hi == ATT_BQ;
        for (int k0 = ds; k0 < q0 + seg_hi; k0 += ATT_BK)
            att_fwd_tile<HD>(o, m, l, qf, Ks, Vs, k, v, k0, T, Hkv, hk, t_row, ds_row, in_seg,
                             /* keys past a row (the diagonal) or rows outside the pass */
                             k0 + ATT_BK - 1 > q0 || !whole_tile, scale_log2, vec);
    }

#pragma unroll
    for (int ri = 0; ri < 2; ri++) {
        float lt = l[ri] + __shfl_xor_sync(0xffffffffu, l[ri], 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        const int t = t_row[ri];
        if (t >= T)
            continue;
        /* l = 0 only if no key is visible (doc_start[t] > t: not a valid input) */
        const float inv = lt > 0.f ? 1.f / lt : 0.f;
        __nv_bfloat16 *orow = out + ((size_t)t * Hq + h) * HD;
#pragma unroll
        for (int n = 0; n < NO; n++) {
            orow[n * 8 + c] = __float2bfloat16(o[n][2 * ri] * inv);
            orow[n * 8 + c + 1] = __float2bfloat16(o[n][2 * ri + 1] * inv);
        }
        if ((lane & 3) == 0)
            lse[(size_t)h * T + t] = lt > 0.f ? (m[ri] + log2f(lt)) * ATT_LN2 : -INFINITY;
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
 * dq_acc with atomics (many key tiles add into one query row). Warp w owns keys
 * [16 w, 16 w + 16) of the transposed products (rows = keys, columns = queries):
 *   S^T = K Q^T, dP^T = V dO^T, P^T = exp(S^T - lse), dS^T = P^T (dP^T - D),
 *   dV += P^T dO, dK += scale dS^T Q;
 * then dS^T goes through shared memory and the warps split dQ += scale dS K by query rows (and
 * by halves of the head dimension when a tile has 32 queries). */
template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_bwd_kernel(__nv_bfloat16 *dk, __nv_bfloat16 *dv, float *dq_acc, const __nv_bfloat16 *dout,
                   const float *lse, const float *Dd, const __nv_bfloat16 *q,
                   const __nv_bfloat16 *k, const __nv_bfloat16 *v, const int32_t *doc_start, int T,
                   int Hq, int Hkv, float scale, float scale_log2, bool vec)
{
    constexpr int BQ = att_bwd_cfg<HD>::BQ;
    constexpr int LDS = HD + 8, LDP = BQ + 8;
    constexpr int KS = HD / 16, NO = HD / 8, NQ = BQ / 8;
    constexpr int QB = BQ / 16, PARTS = 4 / QB, DW = HD / PARTS; /* dQ: warps per query block */
    extern __shared__ __align__(16) unsigned char att_raw[];
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)att_raw; /* [BK][LDS] */
    __nv_bfloat16 *Vs = Ks + ATT_BK * LDS;        /* [BK][LDS] */
    __nv_bfloat16 *Qs = Vs + ATT_BK * LDS;        /* [BQ][LDS] */
    __nv_bfloat16 *dOs = Qs + BQ * LDS;           /* [BQ][LDS] */
    __nv_bfloat16 *dSs = dOs + BQ * LDS;          /* [BK][LDP] dS^T: keys x queries */
    float *lse_s = (float *)(dSs + ATT_BK * LDP); /* [BQ] lse in base 2 */
    float *D_s = lse_s + BQ;                      /* [BQ] */
    int *dss = (int *)(D_s + BQ);                 /* [BQ] */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, c = 2 * (lane & 3);
    const int k0 = blockIdx.x * ATT_BK;
    const int hk = blockIdx.y;
    const int group = Hq / Hkv;
    const int k_last = min(k0 + ATT_BK, T) - 1;
    const int krow = warp * 16 + g; /* this thread's key rows krow, krow + 8 (in the tile) */

    att_stage<HD>(Ks, k, k0, ATT_BK, T, Hkv, hk, vec);
    att_stage<HD>(Vs, v, k0, ATT_BK, T, Hkv, hk, vec);

    float dkr[NO][4], dvr[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            dkr[n][i] = 0.f;
            dvr[n][i] = 0.f;
        }

    /* queries before k0 see none of these keys */
    for (int q0 = k0; q0 < T; q0 += BQ) {
        __syncthreads(); /* the previous tile's readers of dss are done */
        for (int r = threadIdx.x; r < BQ; r += ATT_THREADS)
            dss[r] = q0 + r < T ? doc_start[q0 + r] : INT_MAX;
        __syncthreads();
        int ds_lo, ds_hi;
        att_ds_range(dss, BQ, &ds_lo, &ds_hi);
        if (ds_lo > k_last) /* these queries and all later ones are in later documents */
            break;
        /* keys past a query (the diagonal), before its document, or queries past T */
        const bool masked = k0 + ATT_BK - 1 > q0 || ds_hi > k0 || q0 + BQ > T;

        for (int hg = 0; hg < group; hg++) {
            const int h = hk * group + hg;
            att_stage<HD>(Qs, q, q0, BQ, T, Hq, h, vec);
            att_stage<HD>(dOs, dout, q0, BQ, T, Hq, h, vec);
            for (int r = threadIdx.x; r < BQ; r += ATT_THREADS) {
                const int t = q0 + r;
                lse_s[r] = t < T ? lse[(size_t)h * T + t] * ATT_LOG2E : 0.f;
                D_s[r] = t < T ? Dd[(size_t)h * T + t] : 0.f;
            }
            __syncthreads();

            /* S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x BQ queries */
            float st[NQ][4], dpt[NQ][4];
#pragma unroll
            for (int n = 0; n < NQ; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    st[n][i] = 0.f;
                    dpt[n][i] = 0.f;
                }
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                uint32_t ka[4], va[4];
                att_ldsm4(ka, Ks + warp * 16 * LDS + att_a_off(lane, LDS) + kk * 16);
                att_ldsm4(va, Vs + warp * 16 * LDS + att_a_off(lane, LDS) + kk * 16);
#pragma unroll
                for (int qp = 0; qp < NQ / 2; qp++) {
                    uint32_t b[4];
                    att_ldsm4(b, Qs + qp * 16 * LDS + att_b_off(lane, LDS) + kk * 16);
                    att_mma(st[2 * qp], ka, b[0], b[1]);
                    att_mma(st[2 * qp + 1], ka, b[2], b[3]);
                    att_ldsm4(b, dOs + qp * 16 * LDS + att_b_off(lane, LDS) + kk * 16);
                    att_mma(dpt[2 * qp], va, b[0], b[1]);
                    att_mma(dpt[2 * qp + 1], va, b[2], b[3]);
                }
            }

            /* P^T and dS^T in place; masked entries are exactly 0 (never exp of something from
             * lse = -inf) */
#pragma unroll
            for (int n = 0; n < NQ; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int kl = krow + (i >> 1) * 8, ql = n * 8 + c + (i & 1);
                    const bool ok = !masked || att_visible(q0 + ql, dss[ql], k0 + kl, T);
                    const float p = ok ? exp2f(st[n][i] * scale_log2 - lse_s[ql]) : 0.f;
                    st[n][i] = p;
                    dpt[n][i] = p * (dpt[n][i] - D_s[ql]);
                }

                /* dV += P^T dO and dK += dS^T Q: the accumulators are the A fragments (rows =
                 * keys, k = queries); dO and Q are stored query-major */
#pragma unroll
            for (int qk = 0; qk < NQ / 2; qk++) {
                uint32_t ap[4], as[4];
                att_acc_to_a(ap, st[2 * qk], st[2 * qk + 1]);
                att_acc_to_a(as, dpt[2 * qk], dpt[2 * qk + 1]);
#pragma unroll
                for (int dp = 0; dp < NO / 2; dp++) {
                    uint32_t b[4];
                    att_ldsm4_t(b, dOs + qk * 16 * LDS + att_bt_off(lane, LDS) + dp * 16);
                    att_mma(dvr[2 * dp], ap, b[0], b[1]);
                    att_mma(dvr[2 * dp + 1], ap, b[2], b[3]);
                    att_ldsm4_t(b, Qs + qk * 16 * LDS + att_bt_off(lane, LDS) + dp * 16);
                    att_mma(dkr[2 * dp], as, b[0], b[1]);
                    att_mma(dkr[2 * dp + 1], as, b[2], b[3]);
                }
            }

            /* dS^T to shared memory, bf16 pairs of adjacent queries */
#pragma unroll
            for (int n = 0; n < NQ; n++)
#pragma unroll
                for (int half = 0; half < 2; half++)
                    *(uint32_t *)(dSs + (krow + half * 8) * LDP + n * 8 + c) =
                        att_pack(dpt[n][2 * half], dpt[n][2 * half + 1]);
            __syncthreads();

            /* dQ += scale dS K for query rows [16 qb, 16 qb + 16) and head dims
             * [part DW, part DW + DW): dS is read from dS^T transposed, K stored key-major */
            {
                const int qb = warp % QB, part = warp / QB;
                float dqr[DW / 8][4];
#pragma unroll
                for (int n = 0; n < DW / 8; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        dqr[n][i] = 0.f;
#pragma unroll
                for (int kk = 0; kk < ATT_BK / 16; kk++) {
                    uint32_t a[4];
                    /* A = dS[q][key] from dS^T[key][q]: matrices (q 0-7, keys 0-7),
                     * (q 8-15, keys 0-7), (q 0-7, keys 8-15), (q 8-15, keys 8-15) */
                    att_ldsm4_t(a, dSs + kk * 16 * LDP + att_b_off(lane, LDP) + qb * 16);
#pragma unroll
                    for (int dp = 0; dp < DW / 16; dp++) {
                        uint32_t b[4];
                        att_ldsm4_t(b, Ks + kk * 16 * LDS + att_bt_off(lane, LDS) + part * DW +
                                           dp * 16);
                        att_mma(dqr[2 * dp], a, b[0], b[1]);
                        att_mma(dqr[2 * dp + 1], a, b[2], b[3]);
                    }
                }
#pragma unroll
                for (int ri = 0; ri < 2; ri++) {
                    const int t = q0 + qb * 16 + g + ri * 8;
                    if (t >= T)
                        continue;
                    float *dst = dq_acc + ((size_t)t * Hq + h) * HD + part * DW;
#pragma unroll
                    for (int n = 0; n < DW / 8; n++) {
                        atomicAdd(dst + n * 8 + c, dqr[n][2 * ri] * scale);
                        atomicAdd(dst + n * 8 + c + 1, dqr[n][2 * ri + 1] * scale);
                    }
                }
            }
            __syncthreads(); /* Qs, dOs, dSs, lse_s, D_s are overwritten next */
        }
    }

#pragma unroll
    for (int ri = 0; ri < 2; ri++) {
        const int j_tok = k0 + krow + ri * 8;
        if (j_tok >= T)
            continue;
        const size_t base = ((size_t)j_tok * Hkv + hk) * HD;
#pragma unroll
        for (int n = 0; n < NO; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                dk[base + n * 8 + c + e] = __float2bfloat16(dkr[n][2 * ri + e] * scale);
                dv[base + n * 8 + c + e] = __float2bfloat16(dvr[n][2 * ri + e]);
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

/* may the tiles move as 16-byte vectors? (rows are hd * 2 = 128 or 256 bytes: only the bases
 * matter) */
static bool att_aligned16(const void *a, const void *b, const void *c)
{
    return ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
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
        (const __nv_bfloat16 *)v, doc_start, T, Hq, Hkv, scale * ATT_LOG2E, att_aligned16(q, k, v));
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
        Hq, Hkv, scale, scale * ATT_LOG2E, att_aligned16(q, k, v) && att_aligned16(dout, q, q));
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
