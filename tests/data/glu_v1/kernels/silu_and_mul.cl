// SiLU-and-mul: out[t, i] = silu(x[t, i]) * x[t, I + i], x of shape [T, 2I].
// A flat range over T * I / VEC vectors. Parameters: BLOCK work-items per group,
// VEC elements per load, ITEMS vectors per work-item.
#include "common.clh"

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void silu_and_mul(__global elem_t* restrict out, __global const elem_t* restrict x, long T, int I) {
    const long nv = I / VEC;
    const long total = T * nv;
    const long first = (long)get_group_id(0) * BLOCK * ITEMS + get_local_id(0);
    for (int it = 0; it < ITEMS; ++it) {
        const long e = first + (long)it * BLOCK;
        if (e < total) {
            const long row = e / nv;
            const long c = e - row * nv;
            floatV g = LOADV(c, x + row * 2 * I);
            floatV u = LOADV(c, x + row * 2 * I + I);
            STOREV(g / (1.0f + exp(-g)) * u, c, out + row * I);
        }
    }
}
