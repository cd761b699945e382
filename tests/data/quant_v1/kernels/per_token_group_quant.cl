// Per-token-group quantisation: x [T, H] (fp16 or fp32) cut into groups of GROUP consecutive values;
// per group, scale = max(max|x|, eps) / QMAX and q = round(x / scale), to int8 (OUT_FP8=0) or to the
// float8_e4m3fn bit pattern (OUT_FP8=1). Group g is x[g*GROUP, (g+1)*GROUP), its scale scales[g].
// TPG consecutive work-items share a group (their max is a tree in local memory); a work-group of
// BLOCK work-items covers BLOCK/TPG groups. Values are loaded VEC at a time and kept in private
// memory between the max and the quantisation.
#include "common.clh"

#if OUT_FP8
#define QMAX 448.f
#else
#define QMAX 127.f
#endif

#define NV (GROUP / VEC)              // vectors per group
#define PER ((NV + TPG - 1) / TPG)    // vectors per work-item

// VEC floats into, and VEC bytes out of, private arrays.
#if VEC == 1
#define TO_PRIVATE(v, p) ((p)[0] = (v))
#define STORE_BYTES(p, i, dst) ((dst)[(i)] = (p)[0])
#else
#define TO_PRIVATE(v, p) CAT(vstore, VEC)((v), 0, (p))
#define STORE_BYTES(p, i, dst) CAT(vstore, VEC)(CAT(vload, VEC)(0, (p)), (i), (dst))
#endif

// float -> float8_e4m3fn bits, round to nearest even, saturating; the CUDA template's function.
uint e4m3_bits(float f) {
    const uint bits = as_uint(f);
    const uint sign = (bits >> 24) & 0x80u;
    const uint a = bits & 0x7fffffffu;
    uint code;
    if (a > 0x7f800000u) {
        code = 0x7fu;  // NaN
    } else if (a >= 0x43e00000u) {
        code = 0x7eu;  // |f| >= 448, infinity included: the largest finite value
    } else if (a < 0x3c800000u) {
        code = (uint)rint(as_float(a) * 512.f);  // subnormal multiples of 2^-9; 8 is code 0x08
    } else {
        code = (a >> 20) - (120u << 3);  // exponent rebiased from 127 to 7, top 3 mantissa bits
        const uint rest = a & 0xfffffu;
        code += (rest > 0x80000u || (rest == 0x80000u && (code & 1u))) ? 1u : 0u;
    }
    return sign | code;
}

uchar quantise(float v) {
#if OUT_FP8
    return (uchar)e4m3_bits(v);
#else
    return as_uchar(convert_char_sat_rte(v));
#endif
}

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void per_token_group_quant(__global uchar* restrict q, __global float* restrict scales,
                           __global const elem_t* restrict x, long num_groups, float eps) {
    __local float red[BLOCK];
    const int lid = get_local_id(0);
    const int lane = lid % TPG;
    const long g = (long)get_group_id(0) * (BLOCK / TPG) + lid / TPG;
    const int live = g < num_groups;
    __global const elem_t* xg = x + (live ? g : 0) * GROUP;

    float vals[PER * VEC];
    float amax = 0.f;
    for (int j = 0; j < PER; ++j) {
        const int c = lane + j * TPG;
        if (live && c < NV) {
            TO_PRIVATE(LOADV(c, xg), vals + j * VEC);
            for (int k = 0; k < VEC; ++k) amax = fmax(amax, fabs(vals[j * VEC + k]));
        }
    }
    red[lid] = amax;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = TPG / 2; s > 0; s >>= 1) {
        if (lane < s) red[lid] = fmax(red[lid], red[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (!live) return;

    const float scale = fmax(red[lid - lane], eps) / QMAX;
    if (lane == 0) scales[g] = scale;
    __global uchar* qg = q + g * GROUP;
    for (int j = 0; j < PER; ++j) {
        const int c = lane + j * TPG;
        if (c < NV) {
            uchar r[VEC];
            for (int k = 0; k < VEC; ++k) r[k] = quantise(vals[j * VEC + k] / scale);
            STORE_BYTES(r, c, qg);
        }
    }
}
