/* warp_sum: the sum of a float over the 32 lanes of a warp, by an xor butterfly (every lane gets
 * it). One definition for the kernels that must add in the same order: the small-M matmul's
 * fused RMSNorm reproduces rmsnorm.cu's bits only because both reduce through this.
 * Internal to kernels/: not part of kernels.h. */
#ifndef KGYM_KERNELS_WARP_SUM_CUH
#define KGYM_KERNELS_WARP_SUM_CUH

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#endif
