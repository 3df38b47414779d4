// channel_gate.cu: y = x * C * softmax_c(mean_hw(x) / T), broadcast over H and W.
//
// The answer needs every channel's mean before any channel can be scaled, so the obvious plan
// reads x twice from DRAM (pool, then scale) and writes y once. The fused kernel (config 0)
// serves the second read from L2 instead. Each plane (one image's channel) is cut into chunks of
// about 16 KB; one persistent kernel takes work items from a global ticket counter in the order
//
//     P(0) | P(1) | S(0) | P(2) | S(1) | ... | P(B-1) | S(B-2) | S(B-1)
//
// where P(b) sums every chunk of image b and S(b) scales every chunk of image b. Image b's 16 MB
// is re-read by S(b) after only the 16 MB of P(b+1) (and S(b-1)'s streaming traffic) went past,
// so it is still in the H200's L2, and DRAM traffic drops from three tensor passes to two. S
// reads and all stores are streaming (evict-first), so they do not push the pooled data out.
//
// Synchronisation: the P item that completes image b's chunk count (atomicAdd returns n-1)
// sums the chunk partials into channel means, computes the softmax, writes the C gates and
// raises the image's flag; S items spin on that flag. Between the last P(b) ticket and the
// first S(b) ticket lie all of P(b+1)'s tickets (C * chunks = 1024 for the task, more than the
// blocks that can be resident), so in practice S items find the flag already raised.
// Deadlock freedom does not depend on that: tickets are taken in increasing order by running
// blocks only (each holds its current ticket and at most one larger prefetched one), an S item
// waits only for P items with smaller tickets, and P items never wait. So the smallest
// unfinished ticket always progresses, whatever the grid size or residency.
//
// config 1 runs the plain three-kernel version (pool, softmax, scale): same results, no
// spin-waiting, one more DRAM read of x.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define GATE_THREADS 256
#define CHUNK_FLOATS 4096 // one chunk: 256 threads x 4 float4

__device__ __forceinline__ float4 ld_keep(const float4 *p) // L2 normal priority, skip L1
{
    float4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p));
    return v;
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

// This thread's share of the sum of src[0, len). VEC: src 16-byte aligned and len % 4 == 0.
template <bool VEC>
__device__ __forceinline__ float range_sum(const float *src, long long len)
{
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    if (VEC) {
        const float4 *p = reinterpret_cast<const float4 *>(src);
        const long long n4 = len >> 2;
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
        for (long long i = threadIdx.x; i < len; i += GATE_THREADS)
            s0 += src[i];
    }
    return (s0 + s1) + (s2 + s3);
}

// dst[0, len) = src[0, len) * g, streaming (src is read for the last time).
template <bool VEC>
__device__ __forceinline__ void range_scale(float *dst, const float *src, float g, long long len)
{
    if (VEC) {
        const float4 *p = reinterpret_cast<const float4 *>(src);
        float4 *q = reinterpret_cast<float4 *>(dst);
        const long long n4 = len >> 2;
        long long i = threadIdx.x;
        for (; i + 3 * GATE_THREADS < n4; i += 4 * GATE_THREADS) {
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u)
                v[u] = __ldcs(p + i + u * GATE_THREADS);
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
            float4 a = __ldcs(p + i);
            a.x *= g;
            a.y *= g;
            a.z *= g;
            a.w *= g;
            __stcs(q + i, a);
        }
    } else {
        for (long long i = threadIdx.x; i < len; i += GATE_THREADS)
            dst[i] = src[i] * g;
    }
}

// Channel j's pre-softmax logit: mean over its `splits` partial sums, divided by T. Read with
// ld.cg (L2): other SMs wrote the partials during this kernel.
__device__ __forceinline__ float channel_logit(const float *partials, int j, int splits,
                                               float inv_hw, float inv_temp)
{
    const float *p = partials + (long long)j * splits;
    float s = 0.f;
    for (int q = 0; q < splits; ++q)
        s += __ldcg(p + q);
    return s * inv_hw * inv_temp;
}

// gates[j] = cscale * softmax_j(logit_j) for one image; called by a whole block.
__device__ __forceinline__ void image_softmax(float *gates, const float *partials, int C,
                                              int splits, float inv_hw, float inv_temp,
                                              float cscale, float *red)
{
    float m = -INFINITY;
    for (int j = threadIdx.x; j < C; j += blockDim.x)
        m = fmaxf(m, channel_logit(partials, j, splits, inv_hw, inv_temp));
    m = block_max(m, red);
    float s = 0.f;
    for (int j = threadIdx.x; j < C; j += blockDim.x)
        s += __expf(channel_logit(partials, j, splits, inv_hw, inv_temp) - m);
    s = block_sum(s, red);
    const float k = cscale / s;
    for (int j = threadIdx.x; j < C; j += blockDim.x)
        gates[j] = __expf(channel_logit(partials, j, splits, inv_hw, inv_temp) - m) * k;
}

// ---- config 0: fused persistent kernel ---------------------------------------------------------
// sync[0]: ticket counter; sync[1 .. B]: finished P items per image; sync[1+B .. 2B]: the image's
// gates are ready. Zeroed by gate_init_kernel just before, on the same stream.
__global__ void gate_init_kernel(int *sync, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        sync[i] = 0;
}

template <bool VEC>
__global__ void __launch_bounds__(GATE_THREADS, 6) // <= 40 registers: 6 blocks (1536 threads) per SM
    gate_fused_kernel(float *__restrict__ out, const float *__restrict__ x, float *partials,
                      float *gates, int *sync, int B, int C, long long hw, int splits,
                      long long chunk, float inv_hw, float inv_temp, float cscale)
{
    __shared__ float red[32];
    __shared__ unsigned s_ticket[2];
    __shared__ int s_last;
    __shared__ float s_gate;
    unsigned *ticket = reinterpret_cast<unsigned *>(sync);
    int *count = sync + 1;
    int *ready = sync + 1 + B;
    const unsigned n = (unsigned)C * (unsigned)splits; // items per image, per kind
    const unsigned uB = (unsigned)B;
    const unsigned total = 2u * uB * n;
    const unsigned mid_end = n + 2u * n * (uB - 1u);

    if (threadIdx.x == 0)
        s_ticket[0] = atomicAdd(ticket, 1u);
    for (int it = 0;; it ^= 1) {
        __syncthreads(); // s_ticket[it] written; everyone done with the previous item
        const unsigned t = s_ticket[it];
        if (t >= total)
            break;
        if (threadIdx.x == 0) // prefetch the next ticket; read after the next barrier
            s_ticket[it ^ 1] = atomicAdd(ticket, 1u);
        bool scale;
        unsigned b, item;
        if (t < n) {
            scale = false, b = 0, item = t;
        } else if (t < mid_end) {
            unsigned u = t - n, k = u / (2u * n), r = u % (2u * n);
            scale = r >= n;
            b = scale ? k : k + 1u;
            item = scale ? r - n : r;
        } else {
            scale = true, b = uB - 1u, item = t - mid_end;
        }
        const unsigned c = item / (unsigned)splits, q = item % (unsigned)splits;
        const long long plane = (long long)b * C + c;
        const long long lo = (long long)q * chunk;
        const long long len = (hw - lo < chunk) ? hw - lo : chunk;
        const float *src = x + plane * hw + lo;

        if (!scale) {
            float s = block_sum(range_sum<VEC>(src, len), red);
            if (threadIdx.x == 0) {
                partials[plane * splits + q] = s;
                __threadfence(); // the partial is visible before the count says so
                s_last = atomicAdd(count + b, 1) == (int)n - 1;
            }
            __syncthreads();
            if (s_last) { // every chunk of image b is summed: compute its gates
                __threadfence();
                image_softmax(gates + (long long)b * C, partials + (long long)b * C * splits, C,
                              splits, inv_hw, inv_temp, cscale, red);
                __threadfence(); // each thread's gate writes are visible ...
                __syncthreads(); // ... before thread 0 raises the flag
                if (threadIdx.x == 0)
                    atomicExch(ready + b, 1);
            }
        } else {
            if (threadIdx.x == 0) {
                while (*(volatile int *)(ready + b) == 0)
                    __nanosleep(100);
                __threadfence();
                s_gate = __ldcg(gates + plane);
            }
            __syncthreads();
            range_scale<VEC>(out + plane * hw + lo, src, s_gate, len);
        }
    }
}

// ---- config 1: three plain kernels -------------------------------------------------------------
template <bool VEC>
__global__ void __launch_bounds__(GATE_THREADS)
    gate_pool_kernel(float *__restrict__ sums, const float *__restrict__ x, long long hw)
{
    __shared__ float red[32];
    const long long plane = blockIdx.x;
    float s = block_sum(range_sum<VEC>(x + plane * hw, hw), red);
    if (threadIdx.x == 0)
        sums[plane] = s;
}

__global__ void __launch_bounds__(GATE_THREADS)
    gate_softmax_kernel(float *gates, const float *sums, int C, float inv_hw, float inv_temp,
                        float cscale)
{
    __shared__ float red[32];
    const long long b = blockIdx.x;
    image_softmax(gates + b * C, sums + b * C, C, 1, inv_hw, inv_temp, cscale, red);
}

template <bool VEC>
__global__ void __launch_bounds__(GATE_THREADS)
    gate_scale_kernel(float *__restrict__ out, const float *__restrict__ x,
                      const float *__restrict__ gates, long long planes, long long hw)
{
    // last planes first: the end of x, which the pool kernel read last, may still be in L2
    const long long plane = planes - 1 - (long long)blockIdx.x;
    range_scale<VEC>(out + plane * hw, x + plane * hw, __ldg(gates + plane), hw);
}

static int fused_grid(bool vec)
{
    static int cached[2][64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0)
        dev = 0;
    if (dev < 64 && cached[vec][dev] > 0)
        return cached[vec][dev];
    int sms = 0, occ = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
        sms = 132;
    cudaError_t e = vec ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, gate_fused_kernel<true>,
                                                                        GATE_THREADS, 0)
                        : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, gate_fused_kernel<false>,
                                                                        GATE_THREADS, 0);
    if (e != cudaSuccess || occ <= 0)
        occ = 1;
    cudaGetLastError(); // a failed query must not be reported as the launch's error
    if (dev < 64)
        cached[vec][dev] = sms * occ;
    return sms * occ;
}

// Chunks per plane for the fused kernel (the scratch must hold B * C * splits partials).
extern "C" int channel_gate_splits(long long hw)
{
    long long s = (hw + CHUNK_FLOATS - 1) / CHUNK_FLOATS;
    return s < 1 ? 1 : s > 1024 ? 1024 : (int)s;
}

// scratch: B * C * (splits + 1) floats (partial sums, gates). sync: 1 + 2 * B ints.
extern "C" cudaError_t channel_gate_launcher(float *out, const float *x, float *scratch,
                                             int *sync, int B, int C, long long hw,
                                             float temperature, int config, cudaStream_t stream)
{
    if (B <= 0 || C <= 0 || hw <= 0)
        return cudaSuccess;
    const long long planes = (long long)B * C;
    const int splits = channel_gate_splits(hw);
    if (2 * planes * splits > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    const bool vec = hw % 4 == 0 && (((uintptr_t)out | (uintptr_t)x) & 15) == 0;
    const float inv_hw = (float)(1.0 / (double)hw);
    const float inv_temp = 1.0f / temperature;
    const float cscale = (float)C;
    float *partials = scratch, *gates = scratch + planes * splits;

    if (config == 1) {
        if (vec)
            gate_pool_kernel<true><<<(unsigned)planes, GATE_THREADS, 0, stream>>>(partials, x, hw);
        else
            gate_pool_kernel<false><<<(unsigned)planes, GATE_THREADS, 0, stream>>>(partials, x, hw);
        gate_softmax_kernel<<<(unsigned)B, GATE_THREADS, 0, stream>>>(gates, partials, C, inv_hw,
                                                                      inv_temp, cscale);
        if (vec)
            gate_scale_kernel<true><<<(unsigned)planes, GATE_THREADS, 0, stream>>>(out, x, gates, planes, hw);
        else
            gate_scale_kernel<false><<<(unsigned)planes, GATE_THREADS, 0, stream>>>(out, x, gates, planes, hw);
        return cudaGetLastError();
    }

    // chunk length: a multiple of 4 floats so that every chunk of a vec plane stays aligned
    long long chunk = (hw + splits - 1) / splits;
    chunk = (chunk + 3) / 4 * 4;
    const int nsync = 1 + 2 * B;
    const int init_blocks = (nsync + 255) / 256 < 64 ? (nsync + 255) / 256 : 64;
    gate_init_kernel<<<init_blocks, 256, 0, stream>>>(sync, nsync);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return err;
    long long grid = fused_grid(vec);
    if (grid > 2 * planes * splits)
        grid = 2 * planes * splits;
    if (vec)
        gate_fused_kernel<true><<<(unsigned)grid, GATE_THREADS, 0, stream>>>(
            out, x, partials, gates, sync, B, C, hw, splits, chunk, inv_hw, inv_temp, cscale);
    else
        gate_fused_kernel<false><<<(unsigned)grid, GATE_THREADS, 0, stream>>>(
            out, x, partials, gates, sync, B, C, hw, splits, chunk, inv_hw, inv_temp, cscale);
    return cudaGetLastError();
}
