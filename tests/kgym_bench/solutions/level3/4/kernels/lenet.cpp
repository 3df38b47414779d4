// lenet.cpp: KernelBench L3-4 (LeNet-5, batch 4096 of 1x32x32) on the CPU, float32, one pass.
//
// conv1(1->6, 5x5) + ReLU + 2x2 max-pool, conv2(6->16, 5x5) + ReLU + 2x2 max-pool, then
// fc1(400->120) + ReLU, fc2(120->84) + ReLU, fc3(84->classes). The channels are far too few for
// vectorising over them, so 8 images go through the whole network together, one image per SIMD
// lane: every activation is stored [...][8 images], every weight is a broadcast scalar, and each
// multiply-add serves 8 images. All intermediates of a block of 8 images (about 80 KB) stay in
// cache; ReLU and pooling are applied as the convolutions produce their values (pool(relu(v)) ==
// relu(pool(v)), so only the pooled values are kept). Eager PyTorch runs ten ops over the whole
// batch, writing 77 MB and 26 MB intermediates and reading them back.
//
// One generic body written with GCC vector types (8 floats), compiled twice: for baseline x86-64
// (two SSE halves) and, always inlined into a target("avx2,fma") function, for AVX2 + FMA,
// chosen at run time.
#include <algorithm>
#include <cstdint>
#include <cstring>

// The 32-byte vector helpers below are always inlined, so the note that returning them without
// AVX would change the ABI concerns no real call.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace {

constexpr int L = 8;                  // images per block (SIMD lanes)
constexpr int IN = 32, K = 5;         // input side, kernel side
constexpr int C1 = 6, S1 = 28, Q1 = 14; // conv1 channels, output side, pooled side
constexpr int C2 = 16, S2 = 10, Q2 = 5; // conv2
constexpr int F0 = C2 * Q2 * Q2;      // 400 flattened features

struct Net {
    const float *w1, *b1, *w2, *b2, *fw1, *fb1, *fw2, *fb2, *fw3, *fb3;
    int64_t h1, h2, nc; // fc widths: 120, 84, classes
};

// Per-block scratch (lanes innermost).
struct Block {
    float x[IN * IN * L];
    float p1[C1 * Q1 * Q1 * L];
    float f[F0 * L];
    float h1[256 * L];
    float h2[256 * L];
    float o[256 * L];
};

// 8 floats, one per image of the block; unaligned, may alias the float arrays it is read from.
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));

__attribute__((always_inline)) inline v8 ld(const float *p) { return *reinterpret_cast<const v8u *>(p); }
__attribute__((always_inline)) inline void st(float *p, v8 v) { *reinterpret_cast<v8u *>(p) = v; }
__attribute__((always_inline)) inline v8 vmax(v8 a, v8 b) { return a > b ? a : b; }
__attribute__((always_inline)) inline v8 relu(v8 a) { return vmax(a, v8{}); }

// dst[j][:] = act(b[j] + sum_k w[j][k] * src[k][:]) for j < n, k < m; 4 outputs at a time.
__attribute__((always_inline)) inline void dense(const float *w, const float *b, const float *src,
                                                 float *dst, int64_t n, int64_t m, bool act)
{
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        v8 a0 = v8{} + b[j], a1 = v8{} + b[j + 1], a2 = v8{} + b[j + 2], a3 = v8{} + b[j + 3];
        const float *w0 = w + j * m, *w1 = w0 + m, *w2 = w1 + m, *w3 = w2 + m;
        for (int64_t k = 0; k < m; k++) {
            const v8 s = ld(src + k * L);
            a0 += w0[k] * s;
            a1 += w1[k] * s;
            a2 += w2[k] * s;
            a3 += w3[k] * s;
        }
        st(dst + (j + 0) * L, act ? relu(a0) : a0);
        st(dst + (j + 1) * L, act ? relu(a1) : a1);
        st(dst + (j + 2) * L, act ? relu(a2) : a2);
        st(dst + (j + 3) * L, act ? relu(a3) : a3);
    }
    for (; j < n; j++) {
        v8 a = v8{} + b[j];
        for (int64_t k = 0; k < m; k++)
            a += w[j * m + k] * ld(src + k * L);
        st(dst + j * L, act ? relu(a) : a);
    }
}

// The network for images [i0, i0 + cnt) (cnt <= L; missing lanes are zero images, discarded).
__attribute__((always_inline)) inline void run_block(const float *in, float *out, int64_t i0,
                                                     int64_t cnt, const Net &net, Block &bk)
{
    // input, transposed to [y][x][lane]
    for (int64_t l = 0; l < L; l++) {
        const float *img = in + (i0 + l) * IN * IN;
        for (int p = 0; p < IN * IN; p++)
            bk.x[p * L + l] = l < cnt ? img[p] : 0.0f;
    }
    // conv1 + ReLU + pool: each pooled value from its 2x2 conv outputs
    for (int c = 0; c < C1; c++) {
        const float *w = net.w1 + c * K * K;
        for (int py = 0; py < Q1; py++)
            for (int px = 0; px < Q1; px++) {
                v8 a0 = v8{} + net.b1[c], a1 = a0, a2 = a0, a3 = a0;
                for (int ky = 0; ky < K; ky++)
                    for (int kx = 0; kx < K; kx++) {
                        const float wv = w[ky * K + kx];
                        const float *s = bk.x + ((2 * py + ky) * IN + 2 * px + kx) * L;
                        a0 += wv * ld(s);
                        a1 += wv * ld(s + L);
                        a2 += wv * ld(s + IN * L);
                        a3 += wv * ld(s + IN * L + L);
                    }
                st(bk.p1 + ((c * Q1 + py) * Q1 + px) * L, relu(vmax(vmax(a0, a1), vmax(a2, a3))));
            }
    }
    // conv2 + ReLU + pool, two output channels at a time; flattened as o * 25 + py * 5 + px
    for (int o = 0; o < C2; o += 2) {
        for (int py = 0; py < Q2; py++)
            for (int px = 0; px < Q2; px++) {
                v8 a00 = v8{} + net.b2[o], a01 = a00, a02 = a00, a03 = a00;
                v8 a10 = v8{} + net.b2[o + 1], a11 = a10, a12 = a10, a13 = a10;
                for (int c = 0; c < C1; c++)
                    for (int ky = 0; ky < K; ky++)
                        for (int kx = 0; kx < K; kx++) {
                            const float w0 = net.w2[((o * C1 + c) * K + ky) * K + kx];
                            const float w1 = net.w2[(((o + 1) * C1 + c) * K + ky) * K + kx];
                            const float *s = bk.p1 + ((c * Q1 + 2 * py + ky) * Q1 + 2 * px + kx) * L;
                            const v8 s0 = ld(s), s1 = ld(s + L), s2 = ld(s + Q1 * L),
                                     s3 = ld(s + Q1 * L + L);
                            a00 += w0 * s0;
                            a01 += w0 * s1;
                            a02 += w0 * s2;
                            a03 += w0 * s3;
                            a10 += w1 * s0;
                            a11 += w1 * s1;
                            a12 += w1 * s2;
                            a13 += w1 * s3;
                        }
                st(bk.f + (o * Q2 * Q2 + py * Q2 + px) * L, relu(vmax(vmax(a00, a01), vmax(a02, a03))));
                st(bk.f + ((o + 1) * Q2 * Q2 + py * Q2 + px) * L,
                   relu(vmax(vmax(a10, a11), vmax(a12, a13))));
            }
    }
    dense(net.fw1, net.fb1, bk.f, bk.h1, net.h1, F0, true);
    dense(net.fw2, net.fb2, bk.h1, bk.h2, net.h2, net.h1, true);
    dense(net.fw3, net.fb3, bk.h2, bk.o, net.nc, net.h2, false);
    for (int64_t l = 0; l < cnt; l++)
        for (int64_t j = 0; j < net.nc; j++)
            out[(i0 + l) * net.nc + j] = bk.o[j * L + l];
}

__attribute__((always_inline)) inline void run_all(const float *in, float *out, int64_t batch,
                                                   const Net &net, Block &bk)
{
    for (int64_t i0 = 0; i0 < batch; i0 += L)
        run_block(in, out, i0, std::min<int64_t>(L, batch - i0), net, bk);
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2,fma"))) void run_avx2(const float *in, float *out, int64_t batch,
                                                  const Net &net, Block &bk)
{
    run_all(in, out, batch, net, bk);
}

bool has_avx2()
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

void run_plain(const float *in, float *out, int64_t batch, const Net &net, Block &bk)
{
    run_all(in, out, batch, net, bk);
}

} // namespace

// x: (batch, 1, 32, 32); conv1 (6,1,5,5)+(6); conv2 (16,6,5,5)+(16); fc1 (h1,400)+(h1);
// fc2 (h2,h1)+(h2); fc3 (nc,h2)+(nc); out: (batch, nc). h1, h2, nc <= 256. Returns 0, or -1
// when a width is out of range. block_scratch: lenet_block_bytes() bytes, 64-byte aligned.
extern "C" int lenet5_cpu(float *out, const float *x, int64_t batch, const float *w1,
                          const float *b1, const float *w2, const float *b2, const float *fw1,
                          const float *fb1, const float *fw2, const float *fb2, const float *fw3,
                          const float *fb3, int64_t h1, int64_t h2, int64_t nc,
                          void *block_scratch)
{
    if (h1 < 1 || h1 > 256 || h2 < 1 || h2 > 256 || nc < 1 || nc > 256)
        return -1;
    const Net net{w1, b1, w2, b2, fw1, fb1, fw2, fb2, fw3, fb3, h1, h2, nc};
    Block &bk = *static_cast<Block *>(block_scratch);
#if defined(__x86_64__) || defined(__i386__)
    static const bool avx2 = has_avx2();
    if (avx2) {
        run_avx2(x, out, batch, net, bk);
        return 0;
    }
#endif
    run_plain(x, out, batch, net, bk);
    return 0;
}

extern "C" int64_t lenet_block_bytes() { return sizeof(Block); }
