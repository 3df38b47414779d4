/* swiglu_math: silu(g) * u as swiglu.cu computes it, shared with matmul.cu's fused small-M
 * gate/up kernel so that the fused path gives the same bits as matmuls then kg_swiglu_forward.
 * Internal to kernels/: not part of kernels.h. */
#ifndef KGYM_KERNELS_SWIGLU_MATH_CUH
#define KGYM_KERNELS_SWIGLU_MATH_CUH

/* 1 / (1 + e^-g): e^-g overflows to inf for g < -88, giving 0, never NaN. __fadd_rn: nvcc
 * would otherwise fuse the + 1 with the last multiply inside expf into an FMA, which it did
 * alike in both files (nvcc 13, checked in the SASS) but need not; a plain add cannot be fused. */
static __device__ __forceinline__ float swiglu_sigmoid(float g)
{
    return 1.0f / __fadd_rn(1.0f, expf(-g));
}

/* silu(g) * u = g sigmoid(g) u, in this order (two products and a correctly rounded division:
 * nothing left to contract) */
static __device__ __forceinline__ float swiglu_value(float g, float u)
{
    return g * swiglu_sigmoid(g) * u;
}

#endif
