/* rope.cu: rotary position embedding in HF's rotate_half layout, in place; see kernels.h.
 *
 * A thread owns one pair index i < hd/2 of one token t, computes cos/sin of pos[t] * inv_freq[i]
 * once (fp32 angle as the CPU reference forms it, accurate sincosf: angles reach thousands of
 * radians, where fast __sinf is useless) and rotates the pair (i, i + hd/2) of up to
 * ROPE_HEADS heads of that token: blockIdx.y picks the group of heads. Neighbouring threads
 * take neighbouring i, so each head's halves are read and written as contiguous runs. All of a
 * thread's loads come before its stores, so the loads of its heads are in flight together. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/kernels.h"

typedef __nv_bfloat16 bf16;

/* heads rotated by one thread (each costs 2 loads and 2 stores, the sincosf is shared) */
#define ROPE_HEADS 4
#define ROPE_THREADS 256

/* One tensor of a launch: x [T, heads, hd], its heads in groups of ROPE_HEADS along grid y. */
typedef struct {
    bf16 *x;
    int heads, groups;
} rope_tensor;

/* Rotates up to two tensors (q then k: blockIdx.y past the first's groups is the second's) */
static __global__ void rope_kernel(rope_tensor first, rope_tensor second, const int32_t *pos,
                                   const float *inv_freq, int T, int hd, float sgn)
{
    const bool in_first = (int)blockIdx.y < first.groups;
    bf16 *x = in_first ? first.x : second.x;
    const int heads = in_first ? first.heads : second.heads;
    const int h0 = ((int)blockIdx.y - (in_first ? 0 : first.groups)) * ROPE_HEADS;
    int half = hd / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * (size_t)half)
        return;
    size_t t = idx / (size_t)half;
    int i = (int)(idx % (size_t)half);

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
#pragma unroll
    for (int j = 0; j < ROPE_HEADS; j++) {
        if (h0 + j < heads) {
            base[(size_t)j * hd] = __float2bfloat16_rn(a[j] * cs - b[j] * sn);
            base[(size_t)j * hd + half] = __float2bfloat16_rn(b[j] * cs + a[j] * sn);
        }
    }
}

/* The launch of kg_rope (k NULL, Hkv 0) and kg_rope_qk. */
static cudaError_t rope_launch(kg_bf16 *q, kg_bf16 *k, const int32_t *pos, const float *inv_freq,
                               int T, int Hq, int Hkv, int hd, int sign, cudaStream_t s)
{
    if (T < 0 || Hq <= 0 || Hkv < 0 || hd <= 0 || hd % 2 != 0 || (sign != 1 && sign != -1))
        return cudaErrorInvalidValue;
    rope_tensor first = {(bf16 *)q, Hq, (Hq + ROPE_HEADS - 1) / ROPE_HEADS};
    rope_tensor second = {(bf16 *)k, Hkv, (Hkv + ROPE_HEADS - 1) / ROPE_HEADS};
    if (first.groups + second.groups > 65535) /* gridDim.y's limit */
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!q || (Hkv > 0 && !k) || !pos || !inv_freq)
        return cudaErrorInvalidValue;
    size_t pairs = (size_t)T * (size_t)(hd / 2);
    size_t blocks = (pairs + ROPE_THREADS - 1) / ROPE_THREADS;
    if (blocks > 0x7fffffffu)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)blocks, (unsigned)(first.groups + second.groups));
    rope_kernel<<<grid, ROPE_THREADS, 0, s>>>(first, second, pos, inv_freq, T, hd, (float)sign);
    return cudaGetLastError();
}

extern "C" {

cudaError_t kg_rope(kg_bf16 *x, const int32_t *pos, const float *inv_freq, int T, int heads, int hd,
                    int sign, cudaStream_t s)
{
    return rope_launch(x, NULL, pos, inv_freq, T, heads, 0, hd, sign, s);
}

cudaError_t kg_rope_qk(kg_bf16 *q, kg_bf16 *k, const int32_t *pos, const float *inv_freq, int T,
                       int Hq, int Hkv, int hd, int sign, cudaStream_t s)
{
    if (Hkv <= 0)
        return cudaErrorInvalidValue;
    return rope_launch(q, k, pos, inv_freq, T, Hq, Hkv, hd, sign, s);
}

} /* extern "C" */
