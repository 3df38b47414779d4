// conv_pool_linear.cu: logits = linear(flatten(maxpool_P(relu(conv3x3_pad1(x) + b)))), x [N, Cin,
// H, W], conv weight [Cout, Cin, 3, 3], linear weight [classes, Cout * (H / P) * (W / P)], fp32.
//
// Two kernels and a small reduction, no cuBLAS / cuDNN:
//
// 1. conv + bias + ReLU + max-pool in ONE tensor-core kernel. The full-resolution activation
//    (822 MB at the task's size) never exists: only the pooled features (51 MB) are written.
//    Implicit GEMM on TF32 mma.sync m16n8k8: the GEMM's M rows are 16 pooling windows, its N the
//    output channels, its K the Cin * 9 taps (27, zero-padded to 32). For each of the P x P
//    positions inside the windows the warp computes the 16 x 32 conv values of that position and
//    folds them into a running max held in the accumulator layout, so pooling needs no shuffles
//    and no shared-memory round trip; bias and ReLU are applied once to the max (x -> relu(x + b)
//    is monotone, so relu(max(v) + b) == max(relu(v + b)) exactly, rounding included).
//    A block stages a TF32-rounded, zero-padded input tile (rows of TPH pooled rows x TPW pooled
//    columns, plus the 1-pixel halo) in shared memory; its row stride is 3 mod 4 and its plane
//    stride 1 mod 4, which makes every A-fragment gather bank-conflict free for P = 4 (lanes g
//    hit windows 4 words apart, lanes t taps whose offsets cover all residues mod 4). Each warp
//    keeps its B fragments (32 channels x 32 taps) in registers for the whole block.
// 2. The Linear as a split-K GEMM (M = batch, N = classes, K = 200704): the 803 MB weight is read
//    exactly once, by 264 blocks (two per SM) each streaming a 128-row x K/33 slab, with the
//    64-row feature slab of its K range shared through L2 by the 8 blocks of that range.
//    3xTF32 by default (x = hi + lo, lo*hi + hi*lo + hi*hi in FP32 accumulators: FP32-level
//    accuracy), 64 x 128 x 32 tiles, 4 warps of 64 x 32, a 4-stage cp.async pipeline over
//    unpadded XOR-swizzled tiles with one conflict-free 16-byte LDS per fragment pair. Each
//    split writes its partial [M, N] tile; a last kernel sums the splits in a fixed order and
//    adds the bias (deterministic, no atomics).
//
// config: 0 -> TF32 conv + 3xTF32 linear; 1 -> TF32 conv + plain TF32 linear (faster, less
// accurate); 2 -> FP32 direct conv + FP32 SIMT linear (slow, for checking). The tensor-core conv
// needs Cin <= 3 and a tile that fits shared memory; the tensor-core linear needs K % 4 == 0 and
// 16-byte aligned operands; otherwise the FP32 kernels run.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

// Round a finite float to TF32, to nearest with ties away from zero (what cvt.rna does, in two
// integer ops instead of cvt's four-instruction sequence with its NaN/Inf checks).
__device__ __forceinline__ uint32_t tf32_rna(float x)
{
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

// x ~= hi + lo, both TF32: hi = tf32(x), lo = tf32(x - hi) (x - hi is exact, |lo| <= 2^-11 |x|,
// so hi + lo is within 2^-22 |x| of x).
__device__ __forceinline__ void split_tf32(float x, uint32_t &hi, uint32_t &lo)
{
    hi = tf32_rna(x);
    lo = tf32_rna(x - __uint_as_float(hi));
}

__device__ __forceinline__ void cp_async16(uint32_t smem_addr, const void *gptr, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gptr),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
// kept on one line: the CPU emulator's transform.py matches it
// clang-format off
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
// clang-format on

__device__ __forceinline__ void mma_tf32(float *c, const uint32_t *a, const uint32_t *b)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---------------------------------------------------------------------------------------------
// 1. conv3x3 (padding 1) + bias + ReLU + max-pool P x P (stride P, floor), TF32 tensor cores
// ---------------------------------------------------------------------------------------------
#define CV_THREADS 256
#define CV_COUT 64     // output channels per block: two warps of 32 per window group
#define CV_GROUPS 4    // window groups per block (8 warps = 4 groups x 2 channel halves)
#define CV_WINDOWS 448 // target pooled windows per block (28 m-tiles = 7 per window group)
#define CV_SMEM_MAX (100 * 1024)

// Shared-memory geometry of a conv tile: TPH x TPW pooled windows need (TPH P + 2) rows of
// (TPW P + 2) input pixels per input channel. Row stride S = 3 mod 4, plane stride PL = 1 mod 4.
struct ConvTile {
    int tph, tpw, s, pl;
};

__host__ __device__ inline ConvTile conv_tile_geometry(int tph, int tpw, int P)
{
    ConvTile t;
    t.tph = tph;
    t.tpw = tpw;
    const int cols = tpw * P + 2, rows = tph * P + 2;
    t.s = cols + ((3 - cols % 4) + 4) % 4;
    const int plane = rows * t.s;
    t.pl = plane + ((1 - plane % 4) + 4) % 4;
    return t;
}

// Tile choice: whole pooled rows when they are at most 64 windows wide, about CV_WINDOWS windows
// per block, shrunk until the input tile fits CV_SMEM_MAX. tph == 0: no tile fits.
inline ConvTile conv_choose_tile(int Cin, int P, int PH, int PW)
{
    int tpw = PW < 64 ? PW : 64;
    int tph = (CV_WINDOWS + tpw - 1) / tpw;
    if (tph > PH)
        tph = PH;
    for (;;) {
        const ConvTile t = conv_tile_geometry(tph, tpw, P);
        if ((long long)Cin * t.pl * 4 <= CV_SMEM_MAX)
            return t;
        if (tph > 1)
            --tph;
        else if (tpw > 8)
            tpw = (tpw + 1) / 2;
        else
            return ConvTile{0, 0, 0, 0};
    }
}

inline int conv_smem_bytes(int Cin, const ConvTile &t)
{
    return Cin * t.pl * 4;
}

// Stages input channels [0, CIN) of image rows [iy0, iy0 + rows) x columns [ix0, ix0 + cols)
// in shared memory (plane stride PL, row stride S), TF32-rounded, zero outside the image.
template <int CIN>
__device__ __forceinline__ void conv_stage_input(float *tile, const float *__restrict__ xn, int H,
                                                 int W, int iy0, int ix0, int rows, int cols, int S,
                                                 int PL)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int r = warp; r < CIN * rows; r += CV_THREADS / 32) {
        const int ci = r / rows, rr = r - ci * rows;
        const int iy = iy0 + rr;
        const bool row_in = iy >= 0 && iy < H;
        const float *src = xn + ((long long)ci * H + (row_in ? iy : 0)) * W;
        float *dst = tile + ci * PL + rr * S;
#pragma unroll 4
        for (int c = lane; c < cols; c += 32) {
            const int ix = ix0 + c;
            const float v = row_in && ix >= 0 && ix < W ? __ldg(src + ix) : 0.f;
            dst[c] = __uint_as_float(tf32_rna(v));
        }
    }
}

// grid: (tiles_h * tiles_w, N, ceil(Cout / 64)), CV_THREADS threads, CIN * PL floats of dynamic
// shared memory. feat [N, Cout, PH, PW].
template <int CIN>
__global__ void __launch_bounds__(CV_THREADS, 2)
    conv_pool_tc_kernel(float *__restrict__ feat, const float *__restrict__ x,
                        const float *__restrict__ w, const float *__restrict__ bias, int Cout,
                        int H, int W, int P, int PH, int PW, int TPH, int TPW, int tiles_w, int S,
                        int PL)
{
    extern __shared__ __align__(16) float smem[];
    constexpr int K = CIN * 9, KS = (K + 7) / 8;
    const int n = blockIdx.y;
    const int tile_y = blockIdx.x / tiles_w, tile_x = blockIdx.x - tile_y * tiles_w;
    const int py0 = tile_y * TPH, px0 = tile_x * TPW; // first pooled row / column of the tile
    const int co0 = blockIdx.z * CV_COUT;

    conv_stage_input<CIN>(smem, x + (long long)n * CIN * H * W, H, W, py0 * P - 1, px0 * P - 1,
                          TPH * P + 2, TPW * P + 2, S, PL);

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int half = warp & 1, wgroup = warp >> 1;
    const int cbase = co0 + half * 32; // this warp's 32 channels

    // B fragments: (k = 8s + t, channel g) and (k = 8s + t + 4, channel g) of the 4 n-tiles;
    // padded taps (k >= K) and channels >= Cout are zero.
    uint32_t bf[KS][4][2];
    // shared-memory offset of tap k = 8s + t + 4j (ci, ky, kx); padded taps read offset 0 (a
    // finite input value times a zero weight)
    int toff[KS][2];
#pragma unroll
    for (int s = 0; s < KS; ++s)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int k = 8 * s + t + 4 * j;
            const int ci = k / 9, r = k - 9 * (k / 9);
            toff[s][j] = k < K ? ci * PL + (r / 3) * S + r % 3 : 0;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const int co = cbase + nt * 8 + g;
                bf[s][nt][j] = k < K && co < Cout ? tf32_rna(__ldg(w + (long long)co * K + k)) : 0u;
            }
        }
    // bias of the accumulator columns: channel cbase + nt * 8 + 2t + e
    float bv[4][2];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int co = cbase + nt * 8 + 2 * t + e;
            bv[nt][e] = co < Cout ? __ldg(bias + co) : 0.f;
        }
    __syncthreads(); // the input tile is in place

    const int nwin = TPH * TPW, mtiles = (nwin + 15) / 16;
    for (int mt = wgroup; mt < mtiles; mt += CV_GROUPS) {
        // this thread's windows: m-rows g and g + 8 of the m-tile
        int base[2], py[2], px[2];
        bool ok[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int wi = mt * 16 + g + 8 * h;
            const int wy = wi / TPW, wx = wi - (wi / TPW) * TPW;
            py[h] = py0 + wy;
            px[h] = px0 + wx;
            ok[h] = wi < nwin && py[h] < PH && px[h] < PW;
            base[h] = ok[h] ? wy * P * S + wx * P : 0;
        }
        float mx[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                mx[nt][e] = -INFINITY;

        for (int dy = 0; dy < P; ++dy) {
            for (int dx = 0; dx < P; ++dx) {
                const float *p0 = smem + base[0] + dy * S + dx;
                const float *p1 = smem + base[1] + dy * S + dx;
                float acc[4][4];
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        acc[nt][e] = 0.f;
#pragma unroll
                for (int s = 0; s < KS; ++s) {
                    // (window g, k t), (window g + 8, k t), (g, k t + 4), (g + 8, k t + 4)
                    const uint32_t a[4] = {
                        __float_as_uint(p0[toff[s][0]]), __float_as_uint(p1[toff[s][0]]),
                        __float_as_uint(p0[toff[s][1]]), __float_as_uint(p1[toff[s][1]])};
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt)
                        mma_tf32(acc[nt], a, bf[s][nt]);
                }
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        mx[nt][e] = fmaxf(mx[nt][e], acc[nt][e]);
            }
        }

        // accumulator e of n-tile nt: window g + 8 (e >> 1), channel cbase + nt * 8 + 2t + (e & 1)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int h = e >> 1, co = cbase + nt * 8 + 2 * t + (e & 1);
                if (ok[h] && co < Cout)
                    feat[(((long long)n * Cout + co) * PH + py[h]) * PW + px[h]] =
                        fmaxf(mx[nt][e] + bv[nt][e & 1], 0.f);
            }
    }
}

// FP32 fallback (any Cin): one thread per pooled output, P x P x Cin x 9 FMAs.
__global__ void __launch_bounds__(256)
    conv_pool_direct_kernel(float *__restrict__ feat, const float *__restrict__ x,
                            const float *__restrict__ w, const float *__restrict__ bias, int N,
                            int Cin, int Cout, int H, int W, int P, int PH, int PW)
{
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    const long long total = (long long)N * Cout * PH * PW;
    if (i >= total)
        return;
    const int px = (int)(i % PW), py = (int)((i / PW) % PH);
    const int co = (int)((i / ((long long)PW * PH)) % Cout);
    const long long n = i / ((long long)PW * PH * Cout);
    const float *wc = w + (long long)co * Cin * 9;
    float mx = -INFINITY;
    for (int dy = 0; dy < P; ++dy)
        for (int dx = 0; dx < P; ++dx) {
            const int y = py * P + dy, xx = px * P + dx;
            float s = 0.f;
            for (int ci = 0; ci < Cin; ++ci) {
                const float *xc = x + ((n * Cin + ci) * H) * W;
                for (int ky = 0; ky < 3; ++ky) {
                    const int iy = y + ky - 1;
                    if (iy < 0 || iy >= H)
                        continue;
                    for (int kx = 0; kx < 3; ++kx) {
                        const int ix = xx + kx - 1;
                        if (ix >= 0 && ix < W)
                            s = fmaf(__ldg(xc + (long long)iy * W + ix),
                                     __ldg(wc + ci * 9 + ky * 3 + kx), s);
                    }
                }
            }
            mx = fmaxf(mx, s);
        }
    feat[i] = fmaxf(mx + __ldg(bias + co), 0.f);
}

// ---------------------------------------------------------------------------------------------
// 2. Linear: part[split] = X[:, K range] @ Wt[:, K range]^T (split-K), then out = sum + bias
// ---------------------------------------------------------------------------------------------
#define LG_BM 64
#define LG_BN 128
#define LG_BK 32
#define LG_STAGES 4
#define LG_THREADS 128
#define LG_A_FLOATS (LG_BM * LG_BK)
#define LG_STAGE_FLOATS ((LG_BM + LG_BN) * LG_BK)
#define LG_SMEM_BYTES (LG_STAGES * LG_STAGE_FLOATS * 4)

// Float offset of 16-byte chunk c (0..7) of tile row r: odd rows have their chunks XOR 4, so the
// two rows one quarter-warp reads (g and g + 1, t = 0..3) cover all 32 banks.
__device__ __forceinline__ int swz(int r, int c)
{
    return r * LG_BK + ((c ^ ((r & 1) << 2)) << 2);
}

// Copies rows [grow0, grow0 + ROWS) x columns [k0, k0 + 32) of a row-major [nrows, K] matrix to
// tile rows 0..ROWS-1; chunks outside the matrix are zero-filled (K % 4 == 0).
template <int ROWS>
__device__ __forceinline__ void lg_load_rows(uint32_t st, const float *__restrict__ gsrc, int nrows,
                                             int K, int grow0, int k0)
{
#pragma unroll
    for (int i = 0; i < ROWS * (LG_BK / 4) / LG_THREADS; ++i) {
        const int id = threadIdx.x + i * LG_THREADS;
        const int r = id >> 3, c = id & 7;
        const int gr = grow0 + r, gk = k0 + c * 4;
        const bool ok = gr < nrows && gk < K;
        const float *src = ok ? gsrc + (long long)gr * K + gk : gsrc;
        cp_async16(st + (uint32_t)swz(r, c) * 4u, src, ok ? 16 : 0);
    }
}

// Element j (0/1) of k-step kk (0/1) of a 16-wide k slice: lane t holds floats 4t..4t+3 of the
// slice, k-step 0 takes .x/.y, k-step 1 .z/.w (the same k permutation for both operands).
__device__ __forceinline__ float kpick(const float4 &v, int kk, int j)
{
    return kk == 0 ? (j == 0 ? v.x : v.y) : (j == 0 ? v.z : v.w);
}

// grid: (ceil(N / 128), splits, ceil(M / 64)), LG_THREADS threads, LG_SMEM_BYTES shared memory.
// part [splits, M, N]: split s covers k-tiles [s KT / splits, (s + 1) KT / splits).
template <bool SPLIT3>
__global__ void __launch_bounds__(LG_THREADS, 2)
    linear_splitk_tc_kernel(float *__restrict__ part, const float *__restrict__ X,
                            const float *__restrict__ Wt, int M, int N, int K, int splits)
{
    extern __shared__ __align__(16) float smem[];
    const int row0 = blockIdx.z * LG_BM, col0 = blockIdx.x * LG_BN, split = blockIdx.y;
    const int KT = (K + LG_BK - 1) / LG_BK;
    const int kt0 = (int)((long long)split * KT / splits);
    const int nkt = (int)((long long)(split + 1) * KT / splits) - kt0;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const uint32_t smem_base = (uint32_t)__cvta_generic_to_shared(smem);

    float acc[4][4][4]; // [m-tile][n-tile][element]: all 64 rows x this warp's 32 columns
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[i][j][e] = 0.f;

    auto load_stage = [&](int stage, int kt) {
        const uint32_t st = smem_base + (uint32_t)(stage * LG_STAGE_FLOATS) * 4u;
        const int k0 = (kt0 + kt) * LG_BK;
        lg_load_rows<LG_BM>(st, X, M, K, row0, k0);
        lg_load_rows<LG_BN>(st + LG_A_FLOATS * 4u, Wt, N, K, col0, k0);
    };

#pragma unroll
    for (int s = 0; s < LG_STAGES - 1; ++s) {
        if (s < nkt)
            load_stage(s, s);
        cp_async_commit();
    }

    for (int kt = 0; kt < nkt; ++kt) {
        cp_async_wait<LG_STAGES - 2>(); // tile kt has landed (this thread's copies) ...
        __syncthreads();                // ... everyone's, and stage (kt - 1) % STAGES is free
        {
            const int nk = kt + LG_STAGES - 1;
            if (nk < nkt)
                load_stage(nk % LG_STAGES, nk);
            cp_async_commit(); // possibly empty: keeps the group count in step
        }
        const float *As = smem + (kt % LG_STAGES) * LG_STAGE_FLOATS;
        const float *Bs = As + LG_A_FLOATS;
#pragma unroll
        for (int s = 0; s < 2; ++s) { // two 16-wide k slices, each two m16n8k8 steps
            float4 av[4][2], bw[4];
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
                av[mi][0] = *reinterpret_cast<const float4 *>(As + swz(mi * 16 + g, 4 * s + t));
                av[mi][1] = *reinterpret_cast<const float4 *>(As + swz(mi * 16 + g + 8, 4 * s + t));
            }
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
                bw[ni] =
                    *reinterpret_cast<const float4 *>(Bs + swz(warp * 32 + ni * 8 + g, 4 * s + t));
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
                uint32_t bh[4][2], bl[4][2];
#pragma unroll
                for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        if (SPLIT3)
                            split_tf32(kpick(bw[ni], kk, j), bh[ni][j], bl[ni][j]);
                        else
                            bh[ni][j] = tf32_rna(kpick(bw[ni], kk, j));
                    }
#pragma unroll
                for (int mi = 0; mi < 4; ++mi) {
                    // (row g, k t), (row g + 8, k t), (row g, k t + 4), (row g + 8, k t + 4)
                    const float av4[4] = {kpick(av[mi][0], kk, 0), kpick(av[mi][1], kk, 0),
                                          kpick(av[mi][0], kk, 1), kpick(av[mi][1], kk, 1)};
                    uint32_t ah[4], al[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        if (SPLIT3)
                            split_tf32(av4[e], ah[e], al[e]);
                        else
                            ah[e] = tf32_rna(av4[e]);
                    }
#pragma unroll
                    for (int ni = 0; ni < 4; ++ni) {
                        if (SPLIT3) { // small terms first
                            mma_tf32(acc[mi][ni], al, bh[ni]);
                            mma_tf32(acc[mi][ni], ah, bl[ni]);
                        }
                        mma_tf32(acc[mi][ni], ah, bh[ni]);
                    }
                }
            }
        }
    }
    cp_async_wait<0>();

    // epilogue (c0, c1: row g, columns 2t, 2t + 1; c2, c3: row g + 8)
    float *ps = part + (long long)split * M * N;
    const bool pair_ok = (N % 2) == 0; // float2 stores stay 8-byte aligned
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
        const int col = col0 + warp * 32 + ni * 8 + 2 * t;
        if (col >= N)
            continue;
#pragma unroll
        for (int mi = 0; mi < 4; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + mi * 16 + g + 8 * h;
                if (row >= M)
                    continue;
                const float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
                float *o = ps + (long long)row * N + col;
                if (pair_ok && col + 1 < N) {
                    *reinterpret_cast<float2 *>(o) = make_float2(v0, v1);
                } else {
                    o[0] = v0;
                    if (col + 1 < N)
                        o[1] = v1;
                }
            }
    }
}

// FP32 SIMT fallback (any K, any alignment): 64 x 64 tiles, 4 x 4 per thread, split-K like the
// tensor-core kernel. grid: (ceil(N / 64), splits, ceil(M / 64)), 256 threads.
#define FB_T 64
#define FB_K 16
__global__ void __launch_bounds__(256)
    linear_splitk_fallback_kernel(float *__restrict__ part, const float *__restrict__ X,
                                  const float *__restrict__ Wt, int M, int N, int K, int splits)
{
    __shared__ float As[FB_K][FB_T + 1], Bs[FB_K][FB_T + 1];
    const int row0 = blockIdx.z * FB_T, col0 = blockIdx.x * FB_T, split = blockIdx.y;
    const int KT = (K + FB_K - 1) / FB_K;
    const int kb = (int)((long long)split * KT / splits) * FB_K;
    const int ke = min(K, (int)((long long)(split + 1) * KT / splits) * FB_K);
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    float acc[4][4] = {};
    for (int k0 = kb; k0 < ke; k0 += FB_K) {
        for (int i = threadIdx.x; i < FB_T * FB_K; i += 256) {
            const int r = i / FB_K, k = i % FB_K;
            const int gk = k0 + k;
            As[k][r] = (row0 + r < M && gk < ke) ? X[(long long)(row0 + r) * K + gk] : 0.f;
            Bs[k][r] = (col0 + r < N && gk < ke) ? Wt[(long long)(col0 + r) * K + gk] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < FB_K; ++k)
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    acc[i][j] += As[k][ty + 16 * i] * Bs[k][tx + 16 * j];
        __syncthreads();
    }
    float *ps = part + (long long)split * M * N;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = row0 + ty + 16 * i, c = col0 + tx + 16 * j;
            if (r < M && c < N)
                ps[(long long)r * N + c] = acc[i][j];
        }
}

// out[m, n] = bias[n] + sum over s = 0..splits-1 of part[s, m, n], in that order (deterministic).
__global__ void __launch_bounds__(256)
    splitk_reduce_bias_kernel(float *__restrict__ out, const float *__restrict__ part,
                              const float *__restrict__ bias, int M, int N, int splits)
{
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x, MN = (long long)M * N;
    if (i >= MN)
        return;
    float s = 0.f;
    for (int k = 0; k < splits; ++k)
        s += part[k * MN + i];
    out[i] = s + __ldg(bias + i % N);
}

// Split count for a grid of `tiles` output tiles: enough splits to fill every resident block slot
// once (one wave), at most one per k-tile.
inline int linear_splits_for(int tiles, int resident, int KT)
{
    int s = tiles > 0 ? resident / tiles : 1;
    if (s < 1)
        s = 1;
    return s < KT ? s : (KT > 0 ? KT : 1);
}

// ---- host side: launches
static bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

static bool linear_uses_tc(int K, int config)
{
    return config != 2 && K % 4 == 0;
}

// Resident blocks of the chosen linear kernel on the current device (cached per device).
static int linear_resident_blocks(bool tc)
{
    static int cache[64][2];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0)
        dev = 0;
    if (dev < 64 && cache[dev][tc] > 0)
        return cache[dev][tc];
    int sms = 0, per_sm = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
        sms = 132;
    cudaError_t e;
    if (tc) {
        e = cudaFuncSetAttribute(linear_splitk_tc_kernel<true>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, LG_SMEM_BYTES);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(linear_splitk_tc_kernel<false>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, LG_SMEM_BYTES);
        if (e == cudaSuccess)
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &per_sm, linear_splitk_tc_kernel<true>, LG_THREADS, LG_SMEM_BYTES);
    } else {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, linear_splitk_fallback_kernel,
                                                          256, 0);
    }
    if (e != cudaSuccess || per_sm < 1) {
        cudaGetLastError(); // clear the failed query's (non-sticky) error; assume one per SM
        per_sm = 1;
    }
    const int r = sms * per_sm;
    if (dev < 64)
        cache[dev][tc] = r;
    return r;
}

// Number of K splits the launcher will use (the binding allocates part [splits, M, N]).
extern "C" int conv_relu_maxpool_linear_splits(int M, int N, int K, int config)
{
    if (M <= 0 || N <= 0 || K <= 0)
        return 1;
    const bool tc = linear_uses_tc(K, config);
    const int bm = tc ? LG_BM : FB_T, bn = tc ? LG_BN : FB_T, bk = tc ? LG_BK : FB_K;
    const long long tiles = (long long)((M + bm - 1) / bm) * ((N + bn - 1) / bn);
    const int KT = (int)(((long long)K + bk - 1) / bk);
    return linear_splits_for(tiles > 0x7fffffffLL ? 0x7fffffff : (int)tiles,
                             linear_resident_blocks(tc), KT);
}

template <int CIN>
static cudaError_t launch_conv_tc(float *feat, const float *x, const float *w, const float *b,
                                  int N, int Cout, int H, int W, int P, int PH, int PW,
                                  const ConvTile &t, cudaStream_t stream)
{
    static bool attr_set[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0)
        dev = 0;
    if (dev >= 64 || !attr_set[dev]) {
        cudaError_t e = cudaFuncSetAttribute(
            conv_pool_tc_kernel<CIN>, cudaFuncAttributeMaxDynamicSharedMemorySize, CV_SMEM_MAX);
        if (e != cudaSuccess)
            return e;
        if (dev < 64)
            attr_set[dev] = true;
    }
    const int tiles_w = (PW + t.tpw - 1) / t.tpw, tiles_h = (PH + t.tph - 1) / t.tph;
    const long long tiles = (long long)tiles_w * tiles_h;
    if (tiles > 0x7fffffffLL || N > 65535 || (Cout + CV_COUT - 1) / CV_COUT > 65535)
        return cudaErrorInvalidValue;
    const dim3 grid((unsigned)tiles, (unsigned)N, (unsigned)((Cout + CV_COUT - 1) / CV_COUT));
    conv_pool_tc_kernel<CIN><<<grid, CV_THREADS, conv_smem_bytes(CIN, t), stream>>>(
        feat, x, w, b, Cout, H, W, P, PH, PW, t.tph, t.tpw, tiles_w, t.s, t.pl);
    return cudaGetLastError();
}

static cudaError_t launch_conv(float *feat, const float *x, const float *w, const float *b, int N,
                               int Cin, int Cout, int H, int W, int P, int PH, int PW, int config,
                               cudaStream_t stream)
{
    const ConvTile t = conv_choose_tile(Cin, P, PH, PW);
    if (config != 2 && Cin >= 1 && Cin <= 3 && t.tph > 0) {
        if (Cin == 1)
            return launch_conv_tc<1>(feat, x, w, b, N, Cout, H, W, P, PH, PW, t, stream);
        if (Cin == 2)
            return launch_conv_tc<2>(feat, x, w, b, N, Cout, H, W, P, PH, PW, t, stream);
        return launch_conv_tc<3>(feat, x, w, b, N, Cout, H, W, P, PH, PW, t, stream);
    }
    const long long total = (long long)N * Cout * PH * PW;
    const long long blocks = (total + 255) / 256;
    if (blocks > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    conv_pool_direct_kernel<<<(unsigned)blocks, 256, 0, stream>>>(feat, x, w, b, N, Cin, Cout, H, W,
                                                                  P, PH, PW);
    return cudaGetLastError();
}

static cudaError_t launch_linear(float *out, float *part, const float *X, const float *Wt,
                                 const float *bias, int M, int N, int K, int splits, int config,
                                 cudaStream_t stream)
{
    const bool tc =
        linear_uses_tc(K, config) && aligned16(X) && aligned16(Wt) && ((uintptr_t)part & 7) == 0;
    const int bm = tc ? LG_BM : FB_T, bn = tc ? LG_BN : FB_T;
    const int gx = (N + bn - 1) / bn, gz = (M + bm - 1) / bm;
    if (splits < 1 || splits > 65535 || gz > 65535)
        return cudaErrorInvalidValue;
    const dim3 grid((unsigned)gx, (unsigned)splits, (unsigned)gz);
    if (tc) {
        linear_resident_blocks(true); // sets the shared-memory attribute once per device
        if (config == 1)
            linear_splitk_tc_kernel<false>
                <<<grid, LG_THREADS, LG_SMEM_BYTES, stream>>>(part, X, Wt, M, N, K, splits);
        else
            linear_splitk_tc_kernel<true>
                <<<grid, LG_THREADS, LG_SMEM_BYTES, stream>>>(part, X, Wt, M, N, K, splits);
    } else {
        linear_splitk_fallback_kernel<<<grid, 256, 0, stream>>>(part, X, Wt, M, N, K, splits);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    const long long MN = (long long)M * N, blocks = (MN + 255) / 256;
    if (blocks > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    splitk_reduce_bias_kernel<<<(unsigned)blocks, 256, 0, stream>>>(out, part, bias, M, N, splits);
    return cudaGetLastError();
}

// out [N, classes]; feat [N, Cout, H / P, W / P] and part [splits, N, classes] are scratch
// (splits from conv_relu_maxpool_linear_splits with the same sizes and config).
extern "C" cudaError_t
conv_relu_maxpool_linear_launcher(float *out, float *feat, float *part, const float *x,
                                  const float *conv_w, const float *conv_b, const float *fc_w,
                                  const float *fc_b, int N, int Cin, int H, int W, int Cout, int P,
                                  int classes, int splits, int config, cudaStream_t stream)
{
    if (N <= 0 || classes <= 0)
        return cudaSuccess;
    if (Cin <= 0 || Cout <= 0 || P <= 0 || H < P || W < P)
        return cudaErrorInvalidValue;
    const int PH = H / P, PW = W / P;
    const long long K = (long long)Cout * PH * PW;
    if (K > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    cudaError_t e =
        launch_conv(feat, x, conv_w, conv_b, N, Cin, Cout, H, W, P, PH, PW, config, stream);
    if (e != cudaSuccess)
        return e;
    return launch_linear(out, part, feat, fc_w, fc_b, N, classes, (int)K, splits, config, stream);
}
