// GELU(tanh)-and-mul, naive: out[t, i] = gelu_tanh(x[t, i]) * x[t, I + i]. Scalar loads, a grid-stride
// loop with ITEMS elements per thread per step, 128 threads and a capped grid.
#include "naive.cuh"

extern "C" __global__ void __launch_bounds__(128)
gelu_tanh_and_mul_naive(elem_t* __restrict__ out, const elem_t* __restrict__ x, long long T, int I) {
    constexpr int ITEMS = 1;
    const long long total = T * (long long)I;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x; first < total;
         first += stride * ITEMS) {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long e = first + k * stride;
            if (e < total) {
                const long long row = e / I;
                const long long c = e - row * I;
                const float g = load_f(x[row * 2 * I + c]);
                const float u = load_f(x[row * 2 * I + I + c]);
                const float t = tanhf(0.7978845608f * (g + 0.044715f * g * g * g));
                out[e] = store_f(0.5f * g * (1.f + t) * u);
            }
        }
    }
}
