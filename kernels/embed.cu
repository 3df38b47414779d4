/* embed.cu: token embeddings. Forward copies table rows (16-byte vectors when aligned); backward
 * adds dout rows into the fp32 dtable with atomics, since tokens repeat within a batch. */
#include <cuda_bf16.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"

/* one block per token; vec = 1 copies 8 bf16 at a time (hidden % 8 == 0, aligned buffers) */
static __global__ void embed_fwd_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *table,
                                        const int32_t *tokens, int hidden, int vocab, int vec)
{
    pdl_launch_dependents();
    pdl_wait(); /* the tokens, or the stream rows, may come from the kernel before */
    const int t = blockIdx.x;
    const int tok = tokens[t];
    __nv_bfloat16 *dst = out + (size_t)t * hidden;
    if (tok < 0 || tok >= vocab) { /* invalid token: a NaN row, so the mistake shows */
        for (int i = threadIdx.x; i < hidden; i += blockDim.x)
            dst[i] = __float2bfloat16(__int_as_float(0x7fc00000));
        return;
    }
    const __nv_bfloat16 *src = table + (size_t)tok * hidden;
    if (vec) {
        const uint4 *s4 = (const uint4 *)src;
        uint4 *d4 = (uint4 *)dst;
        for (int i = threadIdx.x; i < hidden / 8; i += blockDim.x)
            d4[i] = s4[i];
    } else {
        for (int i = threadIdx.x; i < hidden; i += blockDim.x)
            dst[i] = src[i];
    }
}

static __global__ void embed_bwd_kernel(float *dtable, const __nv_bfloat16 *dout,
                                        const int32_t *tokens, int hidden, int vocab)
{
    const int t = blockIdx.x;
    const int tok = tokens[t];
    if (tok < 0 || tok >= vocab)
        return;
    const __nv_bfloat16 *src = dout + (size_t)t * hidden;
    float *dst = dtable + (size_t)tok * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        atomicAdd(dst + i, __bfloat162float(src[i]));
}

static int embed_threads(int n)
{
    return n >= 256 ? 256 : (n >= 128 ? 128 : 64);
}

extern "C" {

cudaError_t kg_embed_forward(kg_bf16 *out, const kg_bf16 *table, const int32_t *tokens, int T,
                             int hidden, int vocab, cudaStream_t s)
{
    if (T < 0 || hidden <= 0 || vocab <= 0)
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!out || !table || !tokens)
        return cudaErrorInvalidValue;
    const int vec = hidden % 8 == 0 && ((uintptr_t)out % 16 == 0) && ((uintptr_t)table % 16 == 0);
    const int work = vec ? hidden / 8 : hidden;
    return kg_launch(embed_fwd_kernel, T, embed_threads(work), 0, s, (__nv_bfloat16 *)out,
                     (const __nv_bfloat16 *)table, tokens, hidden, vocab, vec);
}

cudaError_t kg_embed_backward(float *dtable, const kg_bf16 *dout, const int32_t *tokens, int T,
                              int hidden, int vocab, cudaStream_t s)
{
    if (T < 0 || hidden <= 0 || vocab <= 0)
        return cudaErrorInvalidValue;
    if (T == 0)
        return cudaSuccess;
    if (!dtable || !dout || !tokens)
        return cudaErrorInvalidValue;
    embed_bwd_kernel<<<T, embed_threads(hidden), 0, s>>>(dtable, (const __nv_bfloat16 *)dout,
                                                         tokens, hidden, vocab);
    return cudaGetLastError();
}

} /* extern "C" */
