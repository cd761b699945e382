// SiLU-and-mul: out[t, i] = silu(x[t, i]) * x[t, I + i], x of shape [T, 2I], silu(g) = g / (1 + e^-g).
// Indexing and the parameters BLOCK, VEC, ITEMS, ROWS and the defines KI and IDX64: glu.cuh. Its own:
//   FAST   1: e^-g as 2^(-g log2 e) in one ex2.approx.ftz (no rescaling of results below 2^-126, which
//          vanish beside the 1 they are added to) and the division by __fdividef (a reciprocal
//          approximation and a product) instead of IEEE division.
// ROWS=0, FAST=0 with KI=0 and IDX64=1 is the kernel as it was before ROWS, FAST, KI and IDX64.
#include "glu.cuh"

#if FAST
// 2^x in one special-function instruction, results below 2^-126 flushed to zero.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif

__device__ __forceinline__ float silu_mul(float g, float u) {
#if FAST
    return __fdividef(g, 1.f + exp2_ftz(g * -1.4426950408889634f)) * u;  // -1 / ln 2
#else
    return g / (1.f + __expf(-g)) * u;
#endif
}

struct Act {
    __device__ __forceinline__ float operator()(float g, float u) const { return silu_mul(g, u); }
};

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul(elem_t* __restrict__ out, const elem_t* __restrict__ x, long long T, int I) {
    glu(out, x, (idx_t)T, I, Act());
}
