// SiLU-and-mul: out[t, i] = silu(x[t, i]) * x[t, I + i], x of shape [T, 2I].
// A flat grid over T * I / VEC vectors. Parameters: BLOCK threads, VEC elements per
// load, ITEMS vectors per thread.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul(elem_t* __restrict__ out, const elem_t* __restrict__ x, long long T, int I) {
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
            for (int j = 0; j < VEC; ++j) {
                const float g = load_f(a.v[j]);
                r.v[j] = store_f(g / (1.f + __expf(-g)) * load_f(b.v[j]));
            }
            reinterpret_cast<V*>(out + row * I)[c] = r;
        }
    }
}
