// Scripted agent template for the naive gated activations: VEC-wide vector loads and stores,
// BLOCK work-items per group, a grid-stride loop over at most GRID_CAP groups. ACT(g) is the activation.
#include "naive.clh"

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if VEC == 1
typedef float floatV;
#define LOADV(i, p) LOAD(p, i)
#define STOREV(v, i, p) STORE(v, p, i)
#else
typedef CAT(float, VEC) floatV;
#if DTYPE_F16
#define LOADV(i, p) CAT(vload_half, VEC)((i), (p))
#define STOREV(v, i, p) CAT(CAT(vstore_half, VEC), _rte)((v), (i), (p))
#else
#define LOADV(i, p) CAT(vload, VEC)((i), (p))
#define STOREV(v, i, p) CAT(vstore, VEC)((v), (i), (p))
#endif
#endif

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void KERNEL_NAME(__global elem_t* restrict out, __global const elem_t* restrict x, long T, int I) {
    const long nv = I / VEC;
    const long total = T * nv;
    for (long e = get_global_id(0); e < total; e += get_global_size(0)) {
        const long row = e / nv;
        const long c = e - row * nv;
        const floatV g = LOADV(c, x + row * 2 * I);
        const floatV u = LOADV(c, x + row * 2 * I + I);
        STOREV(ACT(g) * u, c, out + row * I);
    }
}
