// conv_transpose3d.cpp: KernelBench L1-72, a grouped, strided, padded ConvTranspose3d (CPU),
// as a gather: each output voxel sums the input voxels whose stride-spaced footprint covers it.
//
// DOES NOT COMPILE (a kgym-bench fixture, expect "compile_error"): the width loop uses `ow_in`,
// a name declared nowhere (the index is `iw`), the kind of slip a first draft has.
#include <cstdint>

struct Conv3dShape {
    int64_t N, Cin, D, H, W;       // input
    int64_t Cout, KD, KH, KW;      // output channels, kernel
    int64_t SD, SH, SW;            // stride
    int64_t PD, PH, PW;            // padding
    int64_t OD, OH, OW;            // output size (output_padding included)
    int64_t groups;
};

extern "C" void conv_transpose3d_cpu(float *out, const float *x, const float *w,
                                     const Conv3dShape *s)
{
    const int64_t cin_g = s->Cin / s->groups, cout_g = s->Cout / s->groups;
    for (int64_t n = 0; n < s->N; n++)
        for (int64_t co = 0; co < s->Cout; co++) {
            const int64_t g = co / cout_g, col = co % cout_g;
            for (int64_t od = 0; od < s->OD; od++)
                for (int64_t oh = 0; oh < s->OH; oh++)
                    for (int64_t ow = 0; ow < s->OW; ow++) {
                        float acc = 0.0f;
                        for (int64_t kd = 0; kd < s->KD; kd++) {
                            const int64_t td = od + s->PD - kd;
                            if (td < 0 || td % s->SD != 0 || td / s->SD >= s->D)
                                continue;
                            for (int64_t kh = 0; kh < s->KH; kh++) {
                                const int64_t th = oh + s->PH - kh;
                                if (th < 0 || th % s->SH != 0 || th / s->SH >= s->H)
                                    continue;
                                for (int64_t kw = 0; kw < s->KW; kw++) {
                                    const int64_t tw = ow + s->PW - kw;
                                    if (tw < 0 || tw % s->SW != 0 || tw / s->SW >= s->W)
                                        continue;
                                    const int64_t id = td / s->SD, ih = th / s->SH, iw = tw / s->SW;
                                    for (int64_t cil = 0; cil < cin_g; cil++) {
                                        const int64_t ci = g * cin_g + cil;
                                        // weight: (Cin, Cout / groups, KD, KH, KW)
                                        const float wv =
                                            w[(((ci * cout_g + col) * s->KD + kd) * s->KH + kh) * s->KW + kw];
                                        acc += wv * x[(((n * s->Cin + ci) * s->D + id) * s->H + ih) * s->W + ow_in];
                                    }
                                }
                            }
                        }
                        out[(((n * s->Cout + co) * s->OD + od) * s->OH + oh) * s->OW + ow] = acc;
                    }
        }
}
