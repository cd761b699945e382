// GELU(tanh)-and-mul: out[t, i] = gelu_tanh(x[t, i]) * x[t, I + i], x of shape [T, 2I],
// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
// A flat grid over T * I / VEC vectors; a block's BLOCK * ITEMS vectors are contiguous,
// and each pass of the block over them is coalesced. Parameters: BLOCK threads,
// VEC elements per load, ITEMS vectors per thread.
#include "common.cuh"

__device__ __forceinline__ float gelu_tanh_f(float g) {
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    return 0.5f * g * (1.f + tanhf(k0 * (g + k1 * g * g * g)));
}

extern "C" __global__ void __launch_bounds__(BLOCK)
gelu_tanh_and_mul(elem_t* __restrict__ out, const elem_t* __restrict__ x, long long T, int I) {
    typedef vec_t<VEC> V;
    const long long nv = I / VEC;
    const long long total = T * nv;
    const long long first = (long long)blockIdx.x * BLOCK * ITEMS + threadIdx.x;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const long long e = first + (long long)it * BLOCK;
        if (e < total) {
            const long long row = e / nv;
            const long long c = e - row * nv;
            const V a = reinterpret_cast<const V*>(x + row * 2 * I)[c];
            const V b = reinterpret_cast<const V*>(x + row * 2 * I + I)[c];
            V r;
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                r.v[j] = store_f(gelu_tanh_f(load_f(a.v[j])) * load_f(b.v[j]));
            reinterpret_cast<V*>(out + row * I)[c] = r;
        }
    }
}
