// cluster_rows_host.cuh: the host side of cluster_rows.cuh (include it after the kernels).
#pragma once
#include <cuda_runtime.h>

#include "cluster_rows.cuh"

// Launches `rows` rows of length L with the cluster kernel if some cluster size (1..16) holds a
// row in shared memory and fits on the device; returns false (nothing launched) otherwise.
// Prefers the smallest cluster whose chunk leaves room for two blocks per SM, then the smallest
// whose chunk fits one block per SM.
template <class Op>
static bool launch_cluster_rows(float *out, const float *x, long long rows, long long L,
                                cudaStream_t stream, cudaError_t *err)
{
    *err = cudaSuccess;
    int dev = 0, max_optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
            cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    const long long budgets[2] = {100 * 1024, (long long)max_optin};
    for (int pass = 0; pass < 2; ++pass) {
        for (int cs = 1; cs <= 16; cs *= 2) {
            long long chunk = (L + cs - 1) / cs;
            chunk = (chunk + 3) / 4 * 4;
            const long long bytes = CR_HDR_F4 * 16 + (chunk + 4) * 4;
            if (bytes > budgets[pass] || bytes > max_optin)
                continue;
            if (rows * cs > 0x7fffffffLL)
                return false;
            auto kern = cluster_rows_kernel<Op>;
            if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)bytes) != cudaSuccess ||
                (cs > 8 &&
                 cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
                     cudaSuccess)) {
                cudaGetLastError();
                continue;
            }
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeClusterDimension;
            attr[0].val.clusterDim.x = (unsigned)cs;
            attr[0].val.clusterDim.y = 1;
            attr[0].val.clusterDim.z = 1;
            cfg.gridDim = dim3((unsigned)(rows * cs));
            cfg.blockDim = dim3(CR_THREADS);
            cfg.dynamicSmemBytes = (size_t)bytes;
            cfg.stream = stream;
            cfg.attrs = attr;
            cfg.numAttrs = 1;
            int nclusters = 0;
            if (cudaOccupancyMaxActiveClusters(&nclusters, kern, &cfg) != cudaSuccess ||
                nclusters < 1) {
                cudaGetLastError();
                continue;
            }
            *err = cudaLaunchKernelEx(&cfg, kern, out, x, L, chunk);
            return true;
        }
    }
    return false;
}
