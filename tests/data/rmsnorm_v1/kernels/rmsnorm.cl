// RMSNorm: out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w.
// One work-group per row. Parameters: BLOCK work-items per group, VEC elements per load.
#include "common.clh"

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void rmsnorm(__global elem_t* restrict out, __global const elem_t* restrict x,
             __global const elem_t* restrict w, int H, float eps) {
    __local float partial[BLOCK];
    const int lid = get_local_id(0);
    const int nv = H / VEC;
    __global const elem_t* xr = x + (size_t)get_group_id(0) * H;
    __global elem_t* orow = out + (size_t)get_group_id(0) * H;

    float ss = 0.f;
    for (int i = lid; i < nv; i += BLOCK) {
        floatV a = LOADV(i, xr);
        ss += HSUM(a * a);
    }
    partial[lid] = ss;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (lid < s) partial[lid] += partial[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float inv = rsqrt(partial[0] / H + eps);
    for (int i = lid; i < nv; i += BLOCK) {
        floatV a = LOADV(i, xr);
        floatV g = LOADV(i, w);
        STOREV(a * inv * g, i, orow);
    }
}
