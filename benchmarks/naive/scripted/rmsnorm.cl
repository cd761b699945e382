// Scripted agent template for the naive RMSNorm: VEC-wide vector loads, THREADS work-items per row,
// a local-memory tree reduction (THREADS a power of two).
#include "naive.clh"

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if VEC == 1
typedef float floatV;
#define LOADV(i, p) LOAD(p, i)
#define STOREV(v, i, p) STORE(v, p, i)
#define HSUM(v) (v)
#else
typedef CAT(float, VEC) floatV;
#if VEC == 2
#define HSUM(v) ((v).s0 + (v).s1)
#elif VEC == 4
#define HSUM(v) ((v).s0 + (v).s1 + (v).s2 + (v).s3)
#else
#define HSUM(v) ((v).s0 + (v).s1 + (v).s2 + (v).s3 + (v).s4 + (v).s5 + (v).s6 + (v).s7)
#endif
#if DTYPE_F16
#define LOADV(i, p) CAT(vload_half, VEC)((i), (p))
#define STOREV(v, i, p) CAT(CAT(vstore_half, VEC), _rte)((v), (i), (p))
#else
#define LOADV(i, p) CAT(vload, VEC)((i), (p))
#define STOREV(v, i, p) CAT(vstore, VEC)((v), (i), (p))
#endif
#endif

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void rmsnorm_naive(__global elem_t* restrict out, __global const elem_t* restrict x,
                   __global const elem_t* restrict w, int H, float eps) {
    __local float partial[THREADS];
    const int tid = get_local_id(0);
    const int nv = H / VEC;
    __global const elem_t* xr = x + (long)get_group_id(0) * H;
    float ss = 0.0f;
    for (int i = tid; i < nv; i += THREADS) {
        const floatV v = LOADV(i, xr);
        ss += HSUM(v * v);
    }
    partial[tid] = ss;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) partial[tid] += partial[tid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float inv = rsqrt(partial[0] / H + eps);
    __global elem_t* orow = out + (long)get_group_id(0) * H;
    for (int i = tid; i < nv; i += THREADS) {
        STOREV(LOADV(i, xr) * inv * LOADV(i, w), i, orow);
    }
}
