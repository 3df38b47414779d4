// channel_gate.cu: y = x * C * softmax_c(mean_hw(x) / T), broadcast over H and W.
//
// The answer needs every channel's mean before any channel can be scaled, so the obvious plan
// reads x twice from DRAM (pool, then scale) and writes y once. The fused kernel (config 0) keeps
// the second read in L2 instead: one persistent kernel takes work items in a fixed order from a
// global ticket counter,
//
//     P(0, *)  |  P(1, *) interleaved with S(0, *)  |  ...  |  S(B-1, *)
//
// where P(b, c) sums channel c of image b and S(b, c) scales it. An image's 16 MB (256 channels
// x 128 x 128 floats) is pooled one phase before it is scaled, so when S(b, c) re-reads its
// plane the data was loaded at most one phase (about 32 MB of traffic) earlier and is still in
// the H200's L2: DRAM traffic drops from 3 to 2 tensor passes. S reads and all stores are
// streaming (evict-first), so they do not push the pooled data out.
//
// Synchronisation: the P item that completes an image's channel count (atomicAdd returns C-1)
// computes that image's softmax, writes the C gates and raises the image's flag; S items spin on
// the flag. Tickets are taken by running blocks only and an S item waits only for P items with
// smaller tickets, which are held by running blocks and never wait themselves, so the kernel
// cannot deadlock whatever the grid size or the number of co-resident blocks.
//
// config 1 runs the plain three-kernel version (pool, softmax, scale) instead: same results,
// no spin-waiting, one extra DRAM read of x.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define GATE_THREADS 256

__device__ __forceinline__ float4 ld_keep(const float4 *p) // L2 normal priority, skip L1
{
    float4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ float4 ld_last_use(const float4 *p) // evict-first: last read
{
    return __ldcs(p);
}

// Block-wide sum / max, result in every thread. Starts with a barrier so that consecutive calls
// may share `red` (32 floats of shared memory).
__device__ __forceinline__ float block_sum(float v, float *red)
{
    __syncthreads();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float t = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}

__device__ __forceinline__ float block_max(float v, float *red)
{
    __syncthreads();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float t = lane < (int)(blockDim.x >> 5) ? red[lane] : -INFINITY;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

// Sum of one plane of hw floats (this thread's share; the caller reduces over the block).
template <bool VEC>
__device__ __forceinline__ float plane_sum(const float *src, long long hw)
{
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    if (VEC) {
        const float4 *p = reinterpret_cast<const float4 *>(src);
        const long long n4 = hw >> 2;
        long long i = threadIdx.x;
        for (; i + 3 * GATE_THREADS < n4; i += 4 * GATE_THREADS) {
            float4 a = ld_keep(p + i), b = ld_keep(p + i + GATE_THREADS);
            float4 c = ld_keep(p + i + 2 * GATE_THREADS), d = ld_keep(p + i + 3 * GATE_THREADS);
            s0 += (a.x + a.y) + (a.z + a.w);
            s1 += (b.x + b.y) + (b.z + b.w);
            s2 += (c.x + c.y) + (c.z + c.w);
            s3 += (d.x + d.y) + (d.z + d.w);
        }
        for (; i < n4; i += GATE_THREADS) {
            float4 a = ld_keep(p + i);
            s0 += (a.x + a.y) + (a.z + a.w);
        }
    } else {
        for (long long i = threadIdx.x; i < hw; i += GATE_THREADS)
            s0 += src[i];
    }
    return (s0 + s1) + (s2 + s3);
}

// dst = src * g over one plane.
template <bool VEC>
__device__ __forceinline__ void plane_scale(float *dst, const float *src, float g, long long hw)
{
    if (VEC) {
        const float4 *p = reinterpret_cast<const float4 *>(src);
        float4 *q = reinterpret_cast<float4 *>(dst);
        const long long n4 = hw >> 2;
        long long i = threadIdx.x;
        for (; i + 3 * GATE_THREADS < n4; i += 4 * GATE_THREADS) {
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u)
                v[u] = ld_last_use(p + i + u * GATE_THREADS);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                v[u].x *= g;
                v[u].y *= g;
                v[u].z *= g;
                v[u].w *= g;
                __stcs(q + i + u * GATE_THREADS, v[u]);
            }
        }
        for (; i < n4; i += GATE_THREADS) {
            float4 a = ld_last_use(p + i);
            a.x *= g;
            a.y *= g;
            a.z *= g;
            a.w *= g;
            __stcs(q + i, a);
        }
    } else {
        for (long long i = threadIdx.x; i < hw; i += GATE_THREADS)
            dst[i] = src[i] * g;
    }
}

// gates[j] = cscale * softmax_j(means[j] * inv_temp) for one image; called by a whole block.
// Means are read with ld.cg (L2), since other SMs wrote them during this kernel.
__device__ __forceinline__ void image_softmax(float *gates, const float *means, int C,
                                              float inv_temp, float cscale, float *red)
{
    float m = -INFINITY;
    for (int j = threadIdx.x; j < C; j += blockDim.x)
        m = fmaxf(m, __ldcg(means + j) * inv_temp);
    m = block_max(m, red);
    float s = 0.f;
    for (int j = threadIdx.x; j < C; j += blockDim.x)
        s += __expf(__ldcg(means + j) * inv_temp - m);
    s = block_sum(s, red);
    const float k = cscale / s;
    for (int j = threadIdx.x; j < C; j += blockDim.x)
        gates[j] = __expf(__ldcg(means + j) * inv_temp - m) * k;
}

// ---- config 0: fused persistent kernel ---------------------------------------------------------
// sync[0]: ticket counter; sync[1 .. B]: pooled-channel count per image; sync[1+B .. 2B]: the
// image's gates are ready. Zeroed by gate_init_kernel just before, on the same stream.
__global__ void gate_init_kernel(int *sync, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        sync[i] = 0;
}

template <bool VEC>
__global__ void __launch_bounds__(GATE_THREADS)
    gate_fused_kernel(float *__restrict__ out, const float *__restrict__ x, float *means,
                      float *gates, int *sync, int B, int C, long long hw, float inv_hw,
                      float inv_temp, float cscale)
{
    __shared__ float red[32];
    __shared__ unsigned s_ticket;
    __shared__ int s_last;
    __shared__ float s_gate;
    unsigned *ticket = reinterpret_cast<unsigned *>(sync);
    int *count = sync + 1;
    int *ready = sync + 1 + B;
    const unsigned uC = (unsigned)C, uB = (unsigned)B;
    const unsigned total = 2u * uB * uC;
    const unsigned mid_end = uC + 2u * uC * (uB - 1u);

    for (;;) {
        if (threadIdx.x == 0)
            s_ticket = atomicAdd(ticket, 1u);
        __syncthreads();
        const unsigned t = s_ticket;
        __syncthreads(); // all threads hold t before thread 0 can take the next ticket
        if (t >= total)
            break;
        bool scale;
        unsigned b, c;
        if (t < uC) {
            scale = false, b = 0, c = t;
        } else if (t < mid_end) {
            unsigned u = t - uC, k = u / (2u * uC), r = u % (2u * uC);
            scale = (r & 1u) != 0;
            b = scale ? k : k + 1u;
            c = r >> 1;
        } else {
            scale = true, b = uB - 1u, c = t - mid_end;
        }
        const long long plane = (long long)b * C + c;
        const float *src = x + plane * hw;

        if (!scale) {
            float s = block_sum(plane_sum<VEC>(src, hw), red);
            if (threadIdx.x == 0) {
                means[plane] = s * inv_hw;
                __threadfence(); // the mean is visible before the count says so
                s_last = atomicAdd(count + b, 1) == C - 1;
            }
            __syncthreads();
            if (s_last) { // every channel of image b is pooled: compute its gates
                __threadfence();
                image_softmax(gates + (long long)b * C, means + (long long)b * C, C, inv_temp,
                              cscale, red);
                __threadfence(); // each thread's gate writes are visible ...
                __syncthreads(); // ... before thread 0 raises the flag
                if (threadIdx.x == 0)
                    atomicExch(ready + b, 1);
            }
        } else {
            if (threadIdx.x == 0) {
                while (*(volatile int *)(ready + b) == 0)
                    __nanosleep(128);
                __threadfence();
                s_gate = __ldcg(gates + plane);
            }
            __syncthreads();
            plane_scale<VEC>(out + plane * hw, src, s_gate, hw);
        }
    }
}

// ---- config 1: three plain kernels -------------------------------------------------------------
template <bool VEC>
__global__ void __launch_bounds__(GATE_THREADS)
    gate_pool_kernel(float *__restrict__ means, const float *__restrict__ x, long long hw,
                     float inv_hw)
{
    __shared__ float red[32];
    const long long plane = blockIdx.x;
    float s = block_sum(plane_sum<VEC>(x + plane * hw, hw), red);
    if (threadIdx.x == 0)
        means[plane] = s * inv_hw;
}

__global__ void __launch_bounds__(GATE_THREADS)
    gate_softmax_kernel(float *gates, const float *means, int C, float inv_temp, float cscale)
{
    __shared__ float red[32];
    const long long b = blockIdx.x;
    image_softmax(gates + b * C, means + b * C, C, inv_temp, cscale, red);
}

template <bool VEC>
__global__ void __launch_bounds__(GATE_THREADS)
    gate_scale_kernel(float *__restrict__ out, const float *__restrict__ x,
                      const float *__restrict__ gates, long long planes, long long hw)
{
    // last planes first: the end of x that the pool kernel read last may still be in L2
    const long long plane = planes - 1 - (long long)blockIdx.x;
    plane_scale<VEC>(out + plane * hw, x + plane * hw, __ldg(gates + plane), hw);
}

static int sm_count_and_occupancy(int *per_sm, bool vec)
{
    static int cached_sms[64], cached_occ[2][64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0)
        dev = 0;
    int sms = 0, occ = 0;
    if (dev < 64 && cached_sms[dev] > 0 && cached_occ[vec][dev] > 0) {
        *per_sm = cached_occ[vec][dev];
        return cached_sms[dev];
    }
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
        sms = 132;
    cudaError_t e = vec ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, gate_fused_kernel<true>,
                                                                        GATE_THREADS, 0)
                        : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, gate_fused_kernel<false>,
                                                                        GATE_THREADS, 0);
    if (e != cudaSuccess || occ <= 0)
        occ = 1;
    cudaGetLastError(); // a failed query must not be reported as the launch's error
    if (dev < 64) {
        cached_sms[dev] = sms;
        cached_occ[vec][dev] = occ;
    }
    *per_sm = occ;
    return sms;
}

// scratch: 2 * B * C floats (means, gates). sync: 1 + 2 * B ints.
extern "C" cudaError_t channel_gate_launcher(float *out, const float *x, float *scratch,
                                             int *sync, int B, int C, long long hw,
                                             float temperature, int config, cudaStream_t stream)
{
    if (B <= 0 || C <= 0 || hw <= 0)
        return cudaSuccess;
    const long long planes = (long long)B * C;
    if (2 * planes > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    const bool vec = hw % 4 == 0 && (((uintptr_t)out | (uintptr_t)x) & 15) == 0;
    const float inv_hw = (float)(1.0 / (double)hw);
    const float inv_temp = 1.0f / temperature;
    const float cscale = (float)C;
    float *means = scratch, *gates = scratch + planes;

    if (config == 1) {
        if (vec)
            gate_pool_kernel<true><<<(unsigned)planes, GATE_THREADS, 0, stream>>>(means, x, hw, inv_hw);
        else
            gate_pool_kernel<false><<<(unsigned)planes, GATE_THREADS, 0, stream>>>(means, x, hw, inv_hw);
        gate_softmax_kernel<<<(unsigned)B, GATE_THREADS, 0, stream>>>(gates, means, C, inv_temp, cscale);
        if (vec)
            gate_scale_kernel<true><<<(unsigned)planes, GATE_THREADS, 0, stream>>>(out, x, gates, planes, hw);
        else
            gate_scale_kernel<false><<<(unsigned)planes, GATE_THREADS, 0, stream>>>(out, x, gates, planes, hw);
        return cudaGetLastError();
    }

    gate_init_kernel<<<(1 + 2 * B + 255) / 256 < 64 ? (1 + 2 * B + 255) / 256 : 64, 256, 0, stream>>>(
        sync, 1 + 2 * B);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return err;
    int per_sm = 1;
    const int sms = sm_count_and_occupancy(&per_sm, vec);
    long long grid = (long long)sms * per_sm;
    if (grid > 2 * planes)
        grid = 2 * planes;
    if (vec)
        gate_fused_kernel<true><<<(unsigned)grid, GATE_THREADS, 0, stream>>>(
            out, x, means, gates, sync, B, C, hw, inv_hw, inv_temp, cscale);
    else
        gate_fused_kernel<false><<<(unsigned)grid, GATE_THREADS, 0, stream>>>(
            out, x, means, gates, sync, B, C, hw, inv_hw, inv_temp, cscale);
    return cudaGetLastError();
}
