// SiLU-and-mul: out[t, i] = silu(x[t, i]) * x[t, I + i], x of shape [T, 2I], silu(g) = g / (1 + e^-g).
// The CUDA template's parameters, the same way (silu_and_mul.cu): BLOCK work-items per group, VEC elements
// per load, ITEMS vectors per work-item; ROWS 0 one flat range over the T * I / VEC vectors, >= 1 a 2-D
// range (dimension 0 over a row's vectors, dimension 1 over groups of ROWS rows, which the groups stride
// over where there are fewer of them); FAST 1 e^-g as native_exp2(-g / ln 2) and native_divide.
// ROWS=0, FAST=0 is the kernel as it was before ROWS and FAST.
#include "common.clh"

#if FAST
#define SILU_MUL(g, u) (native_divide((g), 1.0f + native_exp2((g) * -1.4426950408889634f)) * (u))
#else
#define SILU_MUL(g, u) ((g) / (1.0f + exp(-(g))) * (u))
#endif

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void silu_and_mul(__global elem_t* restrict out, __global const elem_t* restrict x, long T, int I) {
#if ROWS == 0
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
            STOREV(SILU_MUL(g, u), c, out + row * I);
        }
    }
#else
    const int nv = I / VEC;
    const int first = (int)get_group_id(0) * BLOCK * ITEMS + (int)get_local_id(0);
    for (long r0 = (long)get_group_id(1) * ROWS; r0 < T; r0 += (long)get_num_groups(1) * ROWS) {
        floatV g[ROWS][ITEMS], u[ROWS][ITEMS];
        for (int r = 0; r < ROWS; ++r)
            for (int it = 0; it < ITEMS; ++it) {
                const int c = first + it * BLOCK;
                if (r0 + r < T && c < nv) {
                    g[r][it] = LOADV(c, x + (r0 + r) * 2 * I);
                    u[r][it] = LOADV(c, x + (r0 + r) * 2 * I + I);
                }
            }
        for (int r = 0; r < ROWS; ++r)
            for (int it = 0; it < ITEMS; ++it) {
                const int c = first + it * BLOCK;
                if (r0 + r < T && c < nv) STOREV(SILU_MUL(g[r][it], u[r][it]), c, out + (r0 + r) * I);
            }
    }
#endif
}
