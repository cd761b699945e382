// Scripted agent template for the naive gated activations: VEC-wide aligned loads and stores,
// BLOCK threads, a grid-stride loop over a grid of at most GRID_CAP blocks. ACT(g) is the activation.
#include "naive.cuh"

template <int N>
struct __align__(sizeof(elem_t) * N) vec_t {
    elem_t v[N];
};

extern "C" __global__ void __launch_bounds__(BLOCK)
KERNEL_NAME(elem_t* __restrict__ out, const elem_t* __restrict__ x, long long T, int I) {
    typedef vec_t<VEC> V;
    const long long nv = I / VEC;
    const long long total = T * nv;
    for (long long e = (long long)blockIdx.x * BLOCK + threadIdx.x; e < total; e += (long long)gridDim.x * BLOCK) {
        const long long row = e / nv;
        const long long c = e - row * nv;
        const V a = reinterpret_cast<const V*>(x + row * 2 * I)[c];
        const V b = reinterpret_cast<const V*>(x + row * 2 * I + I)[c];
        V r;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float g = load_f(a.v[j]);
            r.v[j] = store_f(ACT(g) * load_f(b.v[j]));
        }
        reinterpret_cast<V*>(out + row * I)[c] = r;
    }
}
