// Fused residual-add + RMSNorm: residual[t, :] += x[t, :] (in place), then
// out[t, :] = residual[t, :] / sqrt(mean(residual[t, :]^2) + eps) * w.
// One work-group per row. Parameters: BLOCK work-items per group, VEC elements per load.
// The second pass re-reads the elements each work-item itself wrote.
#include "common.clh"

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void fused_add_rmsnorm(__global elem_t* restrict out, __global elem_t* restrict residual,
                       __global const elem_t* restrict x, __global const elem_t* restrict w,
                       int H, float eps) {
    __local float partial[BLOCK];
    const int lid = get_local_id(0);
    const int nv = H / VEC;
    const size_t row = (size_t)get_group_id(0) * H;
    __global const elem_t* xr = x + row;
    __global elem_t* rr = residual + row;
    __global elem_t* orow = out + row;

    float ss = 0.f;
    for (int i = lid; i < nv; i += BLOCK) {
        floatV z = LOADV(i, rr) + LOADV(i, xr);
        STOREV(z, i, rr);
        z = LOADV(i, rr);  // the stored (rounded) value, as the second pass sees it
        ss += HSUM(z * z);
    }
    partial[lid] = ss;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (lid < s) partial[lid] += partial[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float inv = rsqrt(partial[0] / H + eps);
    for (int i = lid; i < nv; i += BLOCK) {
        floatV z = LOADV(i, rr);
        floatV g = LOADV(i, w);
        STOREV(z * inv * g, i, orow);
    }
}
