/* bf16_pack: two bf16 held in a 32-bit word <-> two floats, for the kernels' vectorised loads and
 * stores (elementwise.cu, rmsnorm.cu, swiglu.cu). Internal to kernels/: not part of kernels.h. */
#ifndef KGYM_KERNELS_BF16_PACK_CUH
#define KGYM_KERNELS_BF16_PACK_CUH

#include <cuda_bf16.h>
#include <stdint.h>

/* the low / high bf16 of u as a float (a bf16 is a float's top 16 bits) */
static __device__ __forceinline__ float bf_lo(uint32_t u)
{
    return __uint_as_float(u << 16);
}

static __device__ __forceinline__ float bf_hi(uint32_t u)
{
    return __uint_as_float(u & 0xffff0000u);
}

/* lo and hi rounded to nearest even, packed low first */
static __device__ __forceinline__ uint32_t bf_pack(float lo, float hi)
{
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

#endif
