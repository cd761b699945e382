// GELU(tanh)-and-mul: out[t, i] = gelu_tanh(x[t, i]) * x[t, I + i], x of shape [T, 2I],
// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
// Indexing and the parameters BLOCK, VEC, ITEMS, ROWS and the defines KI and IDX64: glu.cuh. Its own:
//   FAST   1: the same function as g / (1 + e^-2z), z the tanh's argument (0.5 (1 + tanh(z)) =
//          1 / (1 + e^-2z)), e^-2z = 2^(g (c1 + c2 g^2)) in one ex2.approx.ftz (results below 2^-126
//          vanish beside the 1 they are added to) and the division by __fdividef: two special-function
//          instructions and five others instead of tanhf's longer sequence.
// ROWS=0, FAST=0 with KI=0 and IDX64=1 is the kernel as it was before ROWS, FAST, KI and IDX64.
#include "glu.cuh"

__device__ __forceinline__ float gelu_tanh_f(float g) {
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    return 0.5f * g * (1.f + tanhf(k0 * (g + k1 * g * g * g)));
}

#if FAST
// 2^x in one special-function instruction, results below 2^-126 flushed to zero.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// g / (1 + e^-2z) with z as above: e^-2z overflows to infinity for very negative g, giving -0.
__device__ __forceinline__ float gelu_tanh_fast_f(float g) {
    const float c1 = -2.302208198144325f;   // -2 sqrt(2 / pi) / ln 2
    const float c2 = -0.1029432395800235f;  // c1 * 0.044715
    return __fdividef(g, 1.f + exp2_ftz(g * (c1 + c2 * g * g)));
}
#endif

__device__ __forceinline__ float gelu_mul(float g, float u) {
#if FAST
    return gelu_tanh_fast_f(g) * u;
#else
    return gelu_tanh_f(g) * u;
#endif
}

struct Act {
    __device__ __forceinline__ float operator()(float g, float u) const { return gelu_mul(g, u); }
};

extern "C" __global__ void __launch_bounds__(BLOCK)
gelu_tanh_and_mul(elem_t* __restrict__ out, const elem_t* __restrict__ x, long long T, int I) {
    glu(out, x, (idx_t)T, I, Act());
}
