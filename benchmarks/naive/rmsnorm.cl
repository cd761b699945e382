// RMSNorm, naive: out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w. One group of THREADS
// work-items per row, scalar loads, a local-memory tree reduction.
#include "naive.clh"

#define THREADS 128

__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void rmsnorm_naive(__global elem_t* restrict out, __global const elem_t* restrict x,
                   __global const elem_t* restrict w, int H, float eps) {
    __local float partial[THREADS];
    const int tid = get_local_id(0);
    __global const elem_t* xr = x + (long)get_group_id(0) * H;
    float ss = 0.0f;
    for (int i = tid; i < H; i += THREADS) {
        const float v = LOAD(xr, i);
        ss += v * v;
    }
    partial[tid] = ss;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) partial[tid] += partial[tid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float inv = rsqrt(partial[0] / H + eps);
    __global elem_t* orow = out + (long)get_group_id(0) * H;
    for (int i = tid; i < H; i += THREADS) {
        STORE(LOAD(xr, i) * inv * LOAD(w, i), orow, i);
    }
}
