// SiLU-and-mul, naive: out[t, i] = silu(x[t, i]) * x[t, I + i]. One scalar element per thread,
// a grid-stride loop, launched with 128 threads and a capped grid.
#include "naive.cuh"

extern "C" __global__ void __launch_bounds__(128)
silu_and_mul_naive(elem_t* __restrict__ out, const elem_t* __restrict__ x, long long T, int I) {
    const long long total = T * (long long)I;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long row = e / I;
        const long long c = e - row * I;
        const float g = load_f(x[row * 2 * I + c]);
        const float u = load_f(x[row * 2 * I + I + c]);
        out[e] = store_f(g / (1.f + __expf(-g)) * u);
    }
}
