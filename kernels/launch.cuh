/* Programmatic dependent launch (PDL, sm_90): how the decode step's kernels overlap their start
 * with the end of the kernel before them.
 *
 * A decode step at batch 1 is ~200 small kernels one after another; each paid the gap between
 * its predecessor's last block and its own first (launch, then ramp-up) on top of its work. With
 * PDL a kernel may start while its predecessor still runs: it issues what does not depend on the
 * predecessor (the small-M matmul's first weight loads) and then waits in pdl_wait() until the
 * predecessor has finished and its writes are visible.
 *
 * The rule that keeps it correct: a kernel launched by kg_launch reads and writes no global
 * memory that another kernel writes before its pdl_wait(). Since every kernel lets the next start
 * at its top, kernel k may begin while k - 2 still runs: what is read before the wait (the
 * small-M matmul's weights) must not be written by any kernel of the chain; weights are only
 * written between decode steps, which the plan upload (a copy) or the graph launch separates. The
 * wait is transitive (the predecessor itself waited for its own), and it returns at once in a
 * kernel launched without the attribute, so these kernels stay correct on every other path
 * (training, plain launches).
 *
 * kg_programmatic_launch (kernels.h) turns the attribute on for the calling thread's launches;
 * off by default, so only the decoder, which turns it on around a step, gets it. */
#ifndef KGYM_KERNELS_LAUNCH_CUH
#define KGYM_KERNELS_LAUNCH_CUH

#include <cuda_runtime.h>

#include <utility>

/* Waits until the kernel before this one in the stream has finished and its writes are visible
 * (at once when launched without PDL). */
static __device__ __forceinline__ void pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Lets the next kernel's blocks start (they wait in their own pdl_wait): called at the top of
 * every kernel kg_launch starts. It fires once every block of this kernel has called it, so all
 * of this kernel's blocks are resident by then and the next kernel's cannot crowd them out. */
static __device__ __forceinline__ void pdl_launch_dependents(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Whether the calling thread's kg_launch calls carry the PDL attribute (launch.cu). */
bool kg_programmatic_launch_on(void);

/* kernel<<<grid, block, smem, s>>>(args...), with the PDL attribute when the calling thread has
 * turned it on; the launch's error. */
template <typename... Params, typename... Args>
static cudaError_t kg_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t s, Args &&...args)
{
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    if (kg_programmatic_launch_on()) {
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
    const cudaError_t last = cudaGetLastError(); /* clears it: the next launch reports its own */
    return e != cudaSuccess ? e : last;
}

#endif
