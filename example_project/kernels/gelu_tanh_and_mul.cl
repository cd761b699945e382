// GELU(tanh)-and-mul: out[t, i] = gelu_tanh(x[t, i]) * x[t, I + i], x of shape [T, 2I],
// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
// The CUDA template's parameters, the same way (gelu_tanh_and_mul.cu): BLOCK work-items per group, VEC
// elements per load, ITEMS vectors per work-item; ROWS 0 one flat range over the T * I / VEC vectors, >= 1
// a 2-D range (dimension 0 over a row's vectors, dimension 1 over groups of ROWS rows, which the groups
// stride over where there are fewer of them); FAST 1 the same function as g / (1 + e^-2z), z the tanh's
// argument, e^-2z = 2^(g (C1 + C2 g^2)) by native_exp2, and native_divide.
// ROWS=0, FAST=0 is the kernel as it was before ROWS and FAST.
#include "common.clh"

#define K0 0.7978845608028654f   // sqrt(2 / pi)
#define K1 0.044715f
#define C1 -2.302208198144325f   // -2 sqrt(2 / pi) / ln 2
#define C2 -0.1029432395800235f  // C1 * 0.044715
#if FAST
#define GELU_MUL(g, u) (native_divide((g), 1.0f + native_exp2((g) * (C1 + C2 * (g) * (g)))) * (u))
#else
#define GELU_MUL(g, u) (0.5f * (g) * (1.0f + tanh(K0 * ((g) + K1 * (g) * (g) * (g)))) * (u))
#endif

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void gelu_tanh_and_mul(__global elem_t* restrict out, __global const elem_t* restrict x, long T,
                       int I) {
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
            STOREV(GELU_MUL(g, u), c, out + row * I);
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
                if (r0 + r < T && c < nv) STOREV(GELU_MUL(g[r][it], u[r][it]), c, out + (r0 + r) * I);
            }
    }
#endif
}
