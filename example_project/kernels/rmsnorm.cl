// RMSNorm: out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w.
// Parameters, as in rmsnorm.cu: BLOCK work-items per group; VEC elements per load and store; ROWS rows
// per group, each by TPR = BLOCK / ROWS work-items; CACHE vectors of its row each work-item keeps in
// private memory from the first pass to the second (0: the second pass reads the row again); REDUCE,
// where a row spans more than 32 work-items: 0 sums by halving in local memory (a barrier a step), 1 lets
// every work-item sum its row's partials itself after one barrier (OpenCL has no warp shuffles here).
// ROWS=1, CACHE=0, REDUCE=0 is the kernel as it was before ROWS, CACHE and REDUCE: one group per row.
#include "common.clh"

#define TPR (BLOCK / ROWS)

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void rmsnorm(__global elem_t* restrict out, __global const elem_t* restrict x,
             __global const elem_t* restrict w, int H, float eps, int T) {
    __local float partial[BLOCK];
    const int lid = get_local_id(0);
#if ROWS == 1
    const int row = get_group_id(0), t = lid;
    const int nv = H / VEC;
#else
    const int row = get_group_id(0) * ROWS + lid / TPR, t = lid % TPR;
    // A row past the last reads and writes nothing, but its work-items still reach every barrier.
    const int nv = row < T ? H / VEC : 0;
#endif
    __global const elem_t* xr = x + (size_t)row * H;
    __global elem_t* orow = out + (size_t)row * H;

    float ss = 0.f;
#if CACHE > 0
    floatV held[CACHE];
    for (int k = 0; k < CACHE; ++k) {
        const int i = t + k * TPR;
        if (i < nv) {
            held[k] = LOADV(i, xr);
            ss += HSUM(held[k] * held[k]);
        }
    }
#endif
    // What private memory does not hold (all of the row at CACHE=0) is read from memory.
    for (int i = t + CACHE * TPR; i < nv; i += TPR) {
        floatV a = LOADV(i, xr);
        ss += HSUM(a * a);
    }
    partial[lid] = ss;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int first = lid - t;  // the row's first work-item (0 at ROWS=1)
#if REDUCE == 1
    float total = 0.f;
    for (int k = 0; k < TPR; ++k) total += partial[first + k];
    const float inv = rsqrt(total / H + eps);
#else
    for (int s = TPR / 2; s > 0; s >>= 1) {
        if (t < s) partial[lid] += partial[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float inv = rsqrt(partial[first] / H + eps);
#endif
#if CACHE > 0
    for (int k = 0; k < CACHE; ++k) {
        const int i = t + k * TPR;
        if (i < nv) {
            floatV g = LOADV(i, w);
            STOREV(held[k] * inv * g, i, orow);
        }
    }
#endif
    for (int i = t + CACHE * TPR; i < nv; i += TPR) {
        floatV a = LOADV(i, xr);
        floatV g = LOADV(i, w);
        STOREV(a * inv * g, i, orow);
    }
}
