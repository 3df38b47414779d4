/* kvcache.cu: the decoding KV cache in slots, and flash-decoding attention over it.
 * kg_decode_attention runs in two kernels: a partial kernel, one block per (sequence, kv head,
 * chunk of DEC_CHUNK cached tokens), computing for each of the Hq/Hkv query heads of that kv
 * head (they share the K/V loads) the chunk's max score, sum of exponentials and unnormalised
 * output in fp32; then a merge kernel that combines the chunks by their log-sum-exp. The grid
 * is sized by max_len (the host cannot read ctx_len): chunks past ctx_len[b] write an empty
 * partial (max -inf, sum 0) and leave. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define DEC_CHUNK 256
#define DEC_THREADS 256
/* query heads one pass of the output loop carries in registers */
#define DEC_HEADS 8

/* one block per token t: copies its Hkv * hd values of k and v to [slot[t], pos[t]] */
static __global__ void kv_write_kernel(__nv_bfloat16 *kc, __nv_bfloat16 *vc, const __nv_bfloat16 *k,
                                       const __nv_bfloat16 *v, const int32_t *slot,
                                       const int32_t *pos, int n_slots, int max_len, int row,
                                       int vec)
{
    const int t = blockIdx.x;
    const int sl = slot[t], p = pos[t];
    if (sl < 0 || sl >= n_slots || p < 0 || p >= max_len)
        return;
    const size_t dst = ((size_t)sl * max_len + p) * row, src = (size_t)t * row;
    if (vec) {
        for (int i = threadIdx.x; i < row / 8; i += blockDim.x) {
            ((uint4 *)(kc + dst))[i] = ((const uint4 *)(k + src))[i];
            ((uint4 *)(vc + dst))[i] = ((const uint4 *)(v + src))[i];
        }
    } else {
        for (int i = threadIdx.x; i < row; i += blockDim.x) {
            kc[dst + i] = k[src + i];
            vc[dst + i] = v[src + i];
        }
    }
}

/* partial of (b, kv head hk, chunk c) for the G query heads of hk. Shared: qs[G][hd] fp32,
 * sc[G][DEC_CHUNK] scores then probabilities, red[32] for reductions. part rows are
 * [max, sum, o_0 .. o_{hd-1}], at ((b * Hq + h) * n_chunks + c) * (hd + 2). */
static __global__ void decode_partial_kernel(float *part, const __nv_bfloat16 *q,
                                             const __nv_bfloat16 *kc, const __nv_bfloat16 *vc,
                                             const int32_t *slot, const int32_t *ctx_len, int Hq,
                                             int Hkv, int hd, int n_slots, int max_len,
                                             int n_chunks, float scale)
{
    extern __shared__ float smem[];
    const int c = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    const int G = Hq / Hkv;
    float *qs = smem;
    float *sc = qs + G * hd;
    __shared__ float red[32];
    __shared__ float stat[2];

    const int len = ctx_len[b], sl = slot[b];
    const int bad = len < 1 || len > max_len || sl < 0 || sl >= n_slots;
    const int j0 = c * DEC_CHUNK;
    const int n = bad ? 0 : min(DEC_CHUNK, len - j0);
    const size_t prow = (size_t)hd + 2;
    if (n <= 0) { /* empty chunk (or an invalid sequence: NaN, in chunk 0 only) */
        for (int g = 0; g < G; g++) {
            float *pr = part + (((size_t)b * Hq + hk * G + g) * n_chunks + c) * prow;
            for (int i = threadIdx.x; i < hd + 2; i += blockDim.x)
                pr[i] = (bad && c == 0 && i == 0) ? __int_as_float(0x7fc00000)
                        : i == 0                  ? -INFINITY
                                                  : 0.0f;
        }
        return;
    }
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x)
        qs[i] = __bfloat162float(q[((size_t)b * Hq + hk * G) * hd + i]) * scale;
    __syncthreads();

    const size_t row = (size_t)Hkv * hd;
    const __nv_bfloat16 *kb = kc + ((size_t)sl * max_len + j0) * row + (size_t)hk * hd;
    const __nv_bfloat16 *vb = vc + ((size_t)sl * max_len + j0) * row + (size_t)hk * hd;
    /* scores: one warp per token, lanes over hd, so K reads are coalesced */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int j = warp; j < n; j += nw) {
        const __nv_bfloat16 *kr = kb + (size_t)j * row;
        float kv[4];
        for (int u = 0; u < 4; u++) {
            const int d = lane + 32 * u;
            kv[u] = d < hd ? __bfloat162float(kr[d]) : 0.0f;
        }
        for (int g = 0; g < G; g++) {
            float acc = 0.0f;
            for (int u = 0; u < 4; u++) {
                const int d = lane + 32 * u;
                if (d < hd)
                    acc += kv[u] * qs[g * hd + d];
            }
            for (int o = 16; o > 0; o >>= 1)
                acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (lane == 0)
                sc[g * DEC_CHUNK + j] = acc;
        }
    }
    __syncthreads();

    for (int g = 0; g < G; g++) {
        float *s = sc + g * DEC_CHUNK;
        /* max */
        float m = -INFINITY;
        for (int j = threadIdx.x; j < n; j += blockDim.x)
            m = fmaxf(m, s[j]);
        for (int o = 16; o > 0; o >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0)
            red[warp] = m;
        __syncthreads();
        if (threadIdx.x == 0) {
            float mm = red[0];
            for (int w = 1; w < nw; w++)
                mm = fmaxf(mm, red[w]);
            stat[0] = mm;
        }
        __syncthreads();
        m = stat[0];
        float sum = 0.0f;
        for (int j = threadIdx.x; j < n; j += blockDim.x) {
            const float p = __expf(s[j] - m);
            s[j] = p;
            sum += p;
        }
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        __syncthreads(); /* everyone has read stat[0] and red before they are rewritten */
        if (lane == 0)
            red[warp] = sum;
        __syncthreads();
        if (threadIdx.x == 0) {
            float ss = 0.0f;
            for (int w = 0; w < nw; w++)
                ss += red[w];
            float *pr = part + (((size_t)b * Hq + hk * G + g) * n_chunks + c) * prow;
            pr[0] = m;
            pr[1] = ss;
        }
        __syncthreads();
    }

    /* output: the threads as key groups x hd lanes (DEC_THREADS / hd groups: 4 for hd 64, 2 for
     * 128). Each thread walks its group's keys for up to DEC_HEADS query heads at once, so a V
     * element is read once for all of them, and the groups' sums meet in shared memory. (On the
     * H200 this left the call's ~120 us floor at small batches unchanged: the floor is elsewhere,
     * see README.) */
    const int groups = blockDim.x / hd, d = threadIdx.x % hd, kg = threadIdx.x / hd;
    float *acc_s = sc + G * DEC_CHUNK; /* [groups][DEC_HEADS][hd] */
    for (int g0 = 0; g0 < G; g0 += DEC_HEADS) {
        const int ng = min(DEC_HEADS, G - g0);
        float acc[DEC_HEADS];
#pragma unroll
        for (int u = 0; u < DEC_HEADS; u++)
            acc[u] = 0.0f;
        if (kg < groups) {
#pragma unroll 4
            for (int j = kg; j < n; j += groups) {
                const float v = __bfloat162float(vb[(size_t)j * row + d]);
#pragma unroll
                for (int u = 0; u < DEC_HEADS; u++)
                    if (u < ng)
                        acc[u] += sc[(g0 + u) * DEC_CHUNK + j] * v;
            }
#pragma unroll
            for (int u = 0; u < DEC_HEADS; u++)
                acc_s[((size_t)kg * DEC_HEADS + u) * hd + d] = acc[u];
        }
        __syncthreads();
        for (int i = threadIdx.x; i < ng * hd; i += blockDim.x) {
            const int u = i / hd, dd = i % hd;
            float sum = 0.0f;
            for (int k = 0; k < groups; k++)
                sum += acc_s[((size_t)k * DEC_HEADS + u) * hd + dd];
            part[(((size_t)b * Hq + hk * G + g0 + u) * n_chunks + c) * prow + 2 + dd] = sum;
        }
        __syncthreads(); /* acc_s is rewritten by the next heads */
    }
}

/* one block per (b, h): out = sum_c e^{m_c - M} o_c / sum_c e^{m_c - M} s_c */
static __global__ void decode_merge_kernel(__nv_bfloat16 *out, const float *part, int Hq, int hd,
                                           int n_chunks)
{
    const int bh = blockIdx.x;
    const size_t prow = (size_t)hd + 2;
    const float *pb = part + (size_t)bh * n_chunks * prow;
    float M = -INFINITY;
    int nan = 0;
    for (int c = 0; c < n_chunks; c++) {
        const float mc = pb[c * prow];
        nan |= mc != mc;
        M = fmaxf(M, mc);
    }
    float den = 0.0f;
    for (int c = 0; c < n_chunks; c++) {
        const float mc = pb[c * prow];
        if (mc != -INFINITY)
            den += __expf(mc - M) * pb[c * prow + 1];
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int c = 0; c < n_chunks; c++) {
            const float mc = pb[c * prow];
            if (mc != -INFINITY)
                acc += __expf(mc - M) * pb[c * prow + 2 + d];
        }
        const float r = nan ? __int_as_float(0x7fc00000) : acc / den;
        out[(size_t)bh * hd + d] = __float2bfloat16(r);
    }
}

extern "C" {

cudaError_t kg_kv_write(kg_bf16 *k_cache, kg_bf16 *v_cache, const kg_bf16 *k, const kg_bf16 *v,
                        const int32_t *slot, const int32_t *pos, int T, int n_slots, int max_len,
                        int Hkv, int hd, cudaStream_t s)
{
    if (T < 0 || n_slots <= 0 || max_len <= 0 || Hkv <= 0 || hd <= 0)
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!k_cache || !v_cache || !k || !v || !slot || !pos)
        return cudaErrorInvalidValue;
    const int row = Hkv * hd;
    const int vec = row % 8 == 0 && (uintptr_t)k_cache % 16 == 0 && (uintptr_t)v_cache % 16 == 0 &&
                    (uintptr_t)k % 16 == 0 && (uintptr_t)v % 16 == 0;
    const int work = vec ? row / 8 : row;
    const int threads = work >= 256 ? 256 : (work >= 128 ? 128 : 64);
    kv_write_kernel<<<T, threads, 0, s>>>((__nv_bfloat16 *)k_cache, (__nv_bfloat16 *)v_cache,
                                          (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, slot,
                                          pos, n_slots, max_len, row, vec);
    return cudaGetLastError();
}

cudaError_t kg_decode_attention(kg_bf16 *out, const kg_bf16 *q, const kg_bf16 *k_cache,
                                const kg_bf16 *v_cache, const int32_t *slot, const int32_t *ctx_len,
                                int B, int Hq, int Hkv, int hd, int n_slots, int max_len,
                                float scale, cudaStream_t s)
{
    if (B < 0 || Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0 || (hd != 64 && hd != 128) || n_slots <= 0 ||
        max_len <= 0)
        return cudaErrorInvalidValue;
    if (B == 0)
        return cudaSuccess;
    if (!out || !q || !k_cache || !v_cache || !slot || !ctx_len)
        return cudaErrorInvalidValue;
    if (B > 65535 || Hkv > 65535)
        return cudaErrorInvalidValue;
    const int G = Hq / Hkv;
    const int n_chunks = (max_len + DEC_CHUNK - 1) / DEC_CHUNK;
    /* q and scores per query head, then the output's per-key-group sums */
    const size_t smem =
        ((size_t)G * (hd + DEC_CHUNK) + (size_t)DEC_THREADS * DEC_HEADS) * sizeof(float);
    if (smem > 48 * 1024) {
        if (smem > 227 * 1024)
            return cudaErrorInvalidValue;
        cudaError_t e = cudaFuncSetAttribute(
            decode_partial_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return e;
    }
    float *part = NULL;
    cudaError_t e =
        cudaMallocAsync((void **)&part, (size_t)B * Hq * n_chunks * (hd + 2) * sizeof(float), s);
    if (e != cudaSuccess)
        return e;
    dim3 grid(n_chunks, Hkv, B);
    decode_partial_kernel<<<grid, DEC_THREADS, smem, s>>>(
        part, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k_cache,
        (const __nv_bfloat16 *)v_cache, slot, ctx_len, Hq, Hkv, hd, n_slots, max_len, n_chunks,
        scale);
    e = cudaGetLastError();
    if (e == cudaSuccess) {
        decode_merge_kernel<<<B * Hq, hd, 0, s>>>((__nv_bfloat16 *)out, part, Hq, hd, n_chunks);
        e = cudaGetLastError();
    }
    cudaError_t f = cudaFreeAsync(part, s);
    return e != cudaSuccess ? e : f;
}

} /* extern "C" */
