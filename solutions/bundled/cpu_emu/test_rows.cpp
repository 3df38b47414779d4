#include "emu.h"
namespace rms {
#include "rms.inc"
}
using namespace rms;
namespace ln {
#include "ln.inc"
}
#include <random>
template <class K> void launch_vpt(int d4, int rows, K &&k)
{
    int vpt = d4 <= 512 ? 1 : d4 <= 1024 ? 2 : d4 <= 2048 ? 4 : 8;
    int threads = ((d4 + vpt - 1) / vpt + 31) / 32 * 32;
    emu_launch(dim3(rows), dim3(threads), 0, [&] { k(vpt); });
}
int main()
{
    std::mt19937 rng(2); std::normal_distribution<float> nd;
    int bad_total = 0;
    for (int dim : {4, 36, 256, 2048, 2052, 4100, 8192, 16384, 7, 1001}) {
        int rows = 3;
        std::vector<float> x(rows * dim), r(rows * dim), w(dim), b(dim), o(rows * dim), o2(rows * dim);
        for (int i = 0; i < rows; ++i) { float sc = expf(nd(rng)), off = nd(rng); for (int j = 0; j < dim; ++j) { x[i * dim + j] = nd(rng) * sc + off; r[i * dim + j] = nd(rng) * sc; } }
        for (int j = 0; j < dim; ++j) { w[j] = 0.5f + (rng() % 1000) / 1000.f; b[j] = nd(rng) * 0.3f; }
        float eps = 1e-5f;
        // RMSNorm
        for (int path = 0; path < 2; ++path) {
            bool reg = path == 0 && dim % 4 == 0;
            if (path == 0 && !reg) continue;
            if (reg) launch_vpt(dim / 4, rows, [&](int vpt) {
                switch (vpt) { case 1: rmsnorm_reg_kernel<1, 1>(o.data(), x.data(), w.data(), rows, dim, eps); break;
                case 2: rmsnorm_reg_kernel<2, 1>(o.data(), x.data(), w.data(), rows, dim, eps); break;
                case 4: rmsnorm_reg_kernel<4, 2>(o.data(), x.data(), w.data(), rows, dim, eps); break;
                default: rmsnorm_reg_kernel<8, 2>(o.data(), x.data(), w.data(), rows, dim, eps); } });
            else emu_launch(dim3(rows), dim3(dim >= 512 ? 512 : (dim + 31) / 32 * 32), 0, [&] { rmsnorm_generic_kernel(o.data(), x.data(), w.data(), rows, dim, eps); });
            double worst = 0; int bad = 0;
            for (int i = 0; i < rows; ++i) { double ss = 0; for (int j = 0; j < dim; ++j) ss += (double)x[i * dim + j] * x[i * dim + j];
                double inv = 1 / sqrt(ss / dim + eps);
                for (int j = 0; j < dim; ++j) { double ref = x[i * dim + j] * inv * w[j], e = fabs(o[i * dim + j] - ref); worst = std::max(worst, e); bad += !(e <= 1e-4 + 1e-4 * fabs(ref)); } }
            printf("rms dim=%5d %s: bad=%d worst=%.2g\n", dim, reg ? "reg" : "generic", bad, worst); bad_total += bad;
        }
        // add + LayerNorm
        for (int path = 0; path < 2; ++path) {
            bool reg = path == 0 && dim % 4 == 0;
            if (path == 0 && !reg) continue;
            if (reg) launch_vpt(dim / 4, rows, [&](int vpt) {
                switch (vpt) { case 1: ln::add_ln_reg_kernel<1, 1>(o2.data(), x.data(), r.data(), w.data(), b.data(), dim, eps); break;
                case 2: ln::add_ln_reg_kernel<2, 1>(o2.data(), x.data(), r.data(), w.data(), b.data(), dim, eps); break;
                case 4: ln::add_ln_reg_kernel<4, 2>(o2.data(), x.data(), r.data(), w.data(), b.data(), dim, eps); break;
                default: ln::add_ln_reg_kernel<8, 1>(o2.data(), x.data(), r.data(), w.data(), b.data(), dim, eps); } });
            else emu_launch(dim3(rows), dim3(dim >= 512 ? 512 : (dim + 31) / 32 * 32), 0, [&] { ln::add_ln_generic_kernel(o2.data(), x.data(), r.data(), w.data(), b.data(), dim, eps); });
            double worst = 0; int bad = 0;
            for (int i = 0; i < rows; ++i) { double m = 0, v = 0; for (int j = 0; j < dim; ++j) m += (double)x[i * dim + j] + r[i * dim + j]; m /= dim;
                for (int j = 0; j < dim; ++j) { double d = (double)x[i * dim + j] + r[i * dim + j] - m; v += d * d; } v /= dim;
                for (int j = 0; j < dim; ++j) { double ref = ((double)x[i * dim + j] + r[i * dim + j] - m) / sqrt(v + eps) * w[j] + b[j], e = fabs(o2[i * dim + j] - ref);
                    worst = std::max(worst, e); bad += !(e <= 1e-4 + 1e-4 * fabs(ref)); } }
            printf("ln  dim=%5d %s: bad=%d worst=%.2g\n", dim, reg ? "reg" : "generic", bad, worst); bad_total += bad;
        }
    }
    return bad_total != 0;
}
