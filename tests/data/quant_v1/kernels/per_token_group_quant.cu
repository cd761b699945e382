// Per-token-group quantisation: x [T, H] (fp16 or fp32) cut into groups of GROUP consecutive values;
// per group, scale = max(max|x|, eps) / QMAX and q = round(x / scale), to int8 (OUT_FP8=0) or to the
// float8_e4m3fn bit pattern (OUT_FP8=1). Groups are contiguous in memory, so group g is
// x[g*GROUP, (g+1)*GROUP) and its scale is scales[g] ([T, H/GROUP], row-major).
// TPG consecutive threads share a group (a power of two up to 32, so the max is a warp shuffle);
// a block of BLOCK threads covers BLOCK/TPG groups. Each thread keeps its values in registers
// between the max and the quantisation, loading them VEC at a time.
#include "common.cuh"

#if OUT_FP8
#define QMAX 448.f
#else
#define QMAX 127.f
#endif

// float -> float8_e4m3fn bits, round to nearest even, saturating (as PTX cvt.rn.satfinite does).
// On sm_89 and later the hardware conversion below is used instead (two values per instruction);
// this software path keeps the template compiling for every GPU, and is the same arithmetic as the
// OpenCL template's and the numpy reference's.
__device__ __forceinline__ unsigned e4m3_bits(float f) {
    const unsigned bits = __float_as_uint(f);
    const unsigned sign = (bits >> 24) & 0x80u;
    const unsigned a = bits & 0x7fffffffu;
    unsigned code;
    if (a > 0x7f800000u) {
        code = 0x7fu;  // NaN
    } else if (a >= 0x43e00000u) {
        code = 0x7eu;  // |f| >= 448, infinity included: the largest finite value
    } else if (a < 0x3c800000u) {
        // |f| < 2^-6: subnormal multiples of 2^-9 (the product is exact); 8 * 2^-9 is code 0x08.
        code = (unsigned)rintf(__uint_as_float(a) * 512.f);
    } else {
        code = (a >> 20) - (120u << 3);  // exponent rebiased from 127 to 7, top 3 mantissa bits
        const unsigned rest = a & 0xfffffu;
        code += (rest > 0x80000u || (rest == 0x80000u && (code & 1u))) ? 1u : 0u;
    }
    return sign | code;
}

#if OUT_FP8 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FP8_HW 1
// Two floats to two float8_e4m3fn codes in one instruction: lo in the low byte, hi in the high one.
__device__ __forceinline__ unsigned short e4m3x2_bits(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}
#else
#define FP8_HW 0
#endif

__device__ __forceinline__ unsigned char quantise(float v) {
#if FP8_HW
    return (unsigned char)(e4m3x2_bits(v, 0.f) & 0xffu);
#elif OUT_FP8
    return (unsigned char)e4m3_bits(v);
#else
    return (unsigned char)(max(-128, min(127, __float2int_rn(v))) & 0xff);
#endif
}

template <int N>
struct __align__(N) bytes_t {
    unsigned char v[N];
};

extern "C" __global__ void __launch_bounds__(BLOCK)
per_token_group_quant(unsigned char* __restrict__ q, float* __restrict__ scales,
                      const elem_t* __restrict__ x, long long num_groups, float eps) {
    typedef vec_t<VEC> V;
    typedef bytes_t<VEC> Q;
    constexpr int NV = GROUP / VEC;               // vectors per group
    constexpr int PER = (NV + TPG - 1) / TPG;     // vectors per thread
    const int lane = threadIdx.x % TPG;
    const long long g = (long long)blockIdx.x * (BLOCK / TPG) + threadIdx.x / TPG;
    const bool live = g < num_groups;
    const V* xg = reinterpret_cast<const V*>(x + (live ? g : 0) * GROUP);

    V buf[PER];
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int c = lane + j * TPG;
        if (live && c < NV) {
            buf[j] = xg[c];
#pragma unroll
            for (int k = 0; k < VEC; ++k) amax = fmaxf(amax, fabsf(load_f(buf[j].v[k])));
        }
    }
    // Every lane of the warp takes part (no early exit above), as the full-warp mask requires.
#pragma unroll
    for (int o = TPG / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (!live) return;

    const float scale = fmaxf(amax, eps) / QMAX;
    if (lane == 0) scales[g] = scale;
    Q* qg = reinterpret_cast<Q*>(q + g * GROUP);
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int c = lane + j * TPG;
        if (c < NV) {
            Q r;
#if FP8_HW
#pragma unroll
            for (int k = 0; k + 1 < VEC; k += 2) {
                const unsigned short two = e4m3x2_bits(load_f(buf[j].v[k]) / scale, load_f(buf[j].v[k + 1]) / scale);
                r.v[k] = (unsigned char)(two & 0xffu);
                r.v[k + 1] = (unsigned char)(two >> 8);
            }
            if (VEC % 2) r.v[VEC - 1] = quantise(load_f(buf[j].v[VEC - 1]) / scale);
#else
#pragma unroll
            for (int k = 0; k < VEC; ++k) r.v[k] = quantise(load_f(buf[j].v[k]) / scale);
#endif
            qg[c] = r;
        }
    }
}
