// SiLU-and-mul, naive: out[t, i] = silu(x[t, i]) * x[t, I + i]. One scalar element per work-item,
// a grid-stride loop, launched with 128 work-items per group and a capped number of groups.
#include "naive.clh"

__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void silu_and_mul_naive(__global elem_t* restrict out, __global const elem_t* restrict x, long T, int I) {
    const long total = T * (long)I;
    for (long e = get_global_id(0); e < total; e += get_global_size(0)) {
        const long row = e / I;
        const long c = e - row * I;
        const float g = LOAD(x, row * 2 * I + c);
        const float u = LOAD(x, row * 2 * I + I + c);
        STORE(g / (1.0f + exp(-g)) * u, out, e);
    }
}
