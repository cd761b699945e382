// Fused residual-add + RMSNorm: residual[t, :] += x[t, :] (in place), then
// out[t, :] = residual[t, :] / sqrt(mean(residual[t, :]^2) + eps) * w.
// Parameters, as in fused_add_rmsnorm.cu: BLOCK work-items per group; VEC elements per load and store;
// ROWS rows per group, each by TPR = BLOCK / ROWS work-items; CACHE vectors of its row (x + residual,
// rounded) each work-item keeps in private memory from the first pass to the second (0: the second pass
// reads back the residual it stored); REDUCE, where a row spans more than 32 work-items: 0 sums by halving
// in local memory (a barrier a step), 1 lets every work-item sum its row's partials itself after one
// barrier (OpenCL has no warp shuffles here); PREFETCH, with CACHE: 1 loads the held vectors' weights with
// the row, before the reduction.
// ROWS=1, CACHE=0, REDUCE=0, PREFETCH=0 is the kernel as it was before those parameters: one group per row.
#include "common.clh"

#define TPR (BLOCK / ROWS)

// z rounded to the element type, as the residual stores it: the value the second pass would read back.
inline floatV rounded(floatV z) {
#if DTYPE_F16
    ushort bits[VEC];  // half storage: private half arrays need cl_khr_fp16, a half pointer does not
    STOREV(z, 0, (half*)bits);
    return LOADV(0, (const half*)bits);
#else
    return z;
#endif
}

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void fused_add_rmsnorm(__global elem_t* restrict out, __global elem_t* restrict residual,
                       __global const elem_t* restrict x, __global const elem_t* restrict w,
                       int H, float eps, int T) {
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
    const size_t start = (size_t)row * H;
    __global const elem_t* xr = x + start;
    __global elem_t* rr = residual + start;
    __global elem_t* orow = out + start;

    float ss = 0.f;
#if CACHE > 0
    floatV held[CACHE];
#if PREFETCH
    floatV wh[CACHE];
#endif
    for (int k = 0; k < CACHE; ++k) {
        const int i = t + k * TPR;
        if (i < nv) {
#if PREFETCH
            wh[k] = LOADV(i, w);
#endif
            held[k] = rounded(LOADV(i, rr) + LOADV(i, xr));
            STOREV(held[k], i, rr);
            ss += HSUM(held[k] * held[k]);
        }
    }
#endif
    // What private memory does not hold (all of the row at CACHE=0) is stored and read back.
    for (int i = t + CACHE * TPR; i < nv; i += TPR) {
        floatV z = LOADV(i, rr) + LOADV(i, xr);
        STOREV(z, i, rr);
        z = LOADV(i, rr);  // the stored (rounded) value, as the second pass sees it
        ss += HSUM(z * z);
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
#if PREFETCH
            STOREV(held[k] * inv * wh[k], i, orow);
#else
            floatV gk = LOADV(i, w);
            STOREV(held[k] * inv * gk, i, orow);
#endif
        }
    }
#endif
    for (int i = t + CACHE * TPR; i < nv; i += TPR) {
        floatV z = LOADV(i, rr);
        floatV g = LOADV(i, w);
        STOREV(z * inv * g, i, orow);
    }
}
