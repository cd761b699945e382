// GELU(tanh)-and-mul, naive: out[t, i] = gelu_tanh(x[t, i]) * x[t, I + i]. Scalar loads, a grid-stride
// loop with ITEMS elements per work-item per step, 128 work-items per group and a capped grid.
#include "naive.clh"

#define ITEMS 1

__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void gelu_tanh_and_mul_naive(__global elem_t* restrict out, __global const elem_t* restrict x, long T, int I) {
    const long total = T * (long)I;
    const long stride = get_global_size(0);
    for (long first = get_global_id(0); first < total; first += stride * ITEMS) {
        for (int k = 0; k < ITEMS; ++k) {
            const long e = first + k * stride;
            if (e < total) {
                const long row = e / I;
                const long c = e - row * I;
                const float g = LOAD(x, row * 2 * I + c);
                const float u = LOAD(x, row * 2 * I + I + c);
                const float t = tanh(0.7978845608f * (g + 0.044715f * g * g * g));
                STORE(0.5f * g * (1.0f + t) * u, out, e);
            }
        }
    }
}
