/* adamw: one AdamW step over a flat fp32 buffer, in the order of operations of
 * torch.optim.AdamW (single tensor, amsgrad off) and of policy/adamw.c, the CPU version:
 *
 *   g  = grad * grad_scale
 *   p *= 1 - lr * wd                      (decoupled decay, before the update)
 *   m  = lerp(m, g, 1 - b1)
 *   v  = b2 v + (1 - b2) g^2
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *   param = bf16(p)                       (when param is not NULL)
 *
 * The scalars (bias corrections, step size) are computed once on the host in double, as torch
 * computes them in Python floats. One grid-stride loop, four elements per 16-byte load when
 * every pointer allows it, else one at a time. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define AW_THREADS 256
#define AW_MAX_BLOCKS 4096 /* enough to fill any current GPU; the loop strides over the rest */

typedef struct aw_hyper {
    float decay;     /* 1 - lr * wd */
    float w1;        /* 1 - beta1, the lerp weight */
    float beta2, w2; /* beta2, 1 - beta2 */
    float step_size; /* lr / (1 - beta1^step) */
    float bc2_sqrt;  /* sqrt(1 - beta2^step) */
    float eps, grad_scale;
} aw_hyper;

/* torch's lerp picks its formula by the weight, for accuracy near 1 */
static __device__ float aw_lerp(float self, float end, float w)
{
    return w < 0.5f ? self + w * (end - self) : end - (end - self) * (1.0f - w);
}

/* one element: the master weight p and its moments m, v, updated in registers */
static __device__ void aw_one(float *p, float *m, float *v, float g, const aw_hyper *h)
{
    g *= h->grad_scale;
    float pp = *p * h->decay;
    float mm = aw_lerp(*m, g, h->w1);
    float vv = *v * h->beta2 + h->w2 * g * g;
    float denom = sqrtf(vv) / h->bc2_sqrt + h->eps;
    *p = pp + -h->step_size * (mm / denom);
    *m = mm;
    *v = vv;
}

static __device__ uint32_t aw_pack2(float lo, float hi)
{
    uint32_t a = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
    uint32_t b = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
    return a | (b << 16);
}

/* vec: master, grad, m, v are 16-byte aligned and param (if any) 8-byte aligned; the first
 * n / 4 * 4 elements then go four at a time and the remaining (< 4) one at a time. */
static __global__ void __launch_bounds__(AW_THREADS)
    aw_kernel(float *master, kg_bf16 *param, const float *grad, float *m, float *v, size_t n,
              aw_hyper h, int vec)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nvec = vec ? n / 4 : 0;
    for (size_t i = i0; i < nvec; i += stride) {
        float4 p = ((const float4 *)master)[i];
        float4 g = ((const float4 *)grad)[i];
        float4 mm = ((const float4 *)m)[i];
        float4 vv = ((const float4 *)v)[i];
        aw_one(&p.x, &mm.x, &vv.x, g.x, &h);
        aw_one(&p.y, &mm.y, &vv.y, g.y, &h);
        aw_one(&p.z, &mm.z, &vv.z, g.z, &h);
        aw_one(&p.w, &mm.w, &vv.w, g.w, &h);
        ((float4 *)master)[i] = p;
        ((float4 *)m)[i] = mm;
        ((float4 *)v)[i] = vv;
        if (param) {
            uint2 b;
            b.x = aw_pack2(p.x, p.y);
            b.y = aw_pack2(p.z, p.w);
            ((uint2 *)param)[i] = b;
        }
    }
    for (size_t i = nvec * 4 + i0; i < n; i += stride) {
        float p = master[i], mm = m[i], vv = v[i];
        aw_one(&p, &mm, &vv, grad[i], &h);
        master[i] = p;
        m[i] = mm;
        v[i] = vv;
        if (param)
            param[i] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
    }
}

static int aw_aligned(const void *p, uintptr_t a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

extern "C" {

cudaError_t kg_adamw_step(float *master, kg_bf16 *param, const float *grad, float *m, float *v,
                          size_t n, float lr, float beta1, float beta2, float eps,
                          float weight_decay, int step, float grad_scale, cudaStream_t s)
{
    /* the hyperparameters torch.optim.AdamW accepts (NaN fails every comparison) */
    if (!(lr >= 0.f) || !(beta1 >= 0.f && beta1 < 1.f) || !(beta2 >= 0.f && beta2 < 1.f) ||
        !(eps >= 0.f) || !(weight_decay >= 0.f) || step < 1)
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    if (!master || !grad || !m || !v)
        return cudaErrorInvalidValue;
    aw_hyper h;
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    h.decay = (float)(1.0 - (double)lr * (double)weight_decay);
    h.w1 = (float)(1.0 - (double)beta1);
    h.beta2 = beta2;
    h.w2 = (float)(1.0 - (double)beta2);
    h.step_size = (float)((double)lr / bc1);
    h.bc2_sqrt = (float)sqrt(bc2);
    h.eps = eps;
    h.grad_scale = grad_scale;
    int vec = aw_aligned(master, 16) && aw_aligned(grad, 16) && aw_aligned(m, 16) &&
              aw_aligned(v, 16) && (!param || aw_aligned(param, 8));
    size_t items = vec ? (n + 3) / 4 : n;
    size_t blocks = (items + AW_THREADS - 1) / AW_THREADS;
    if (blocks > AW_MAX_BLOCKS)
        blocks = AW_MAX_BLOCKS;
    aw_kernel<<<(unsigned)blocks, AW_THREADS, 0, s>>>(master, param, grad, m, v, n, h, vec);
    return cudaGetLastError();
}

} /* extern "C" */
