// RMSNorm, naive: out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w. One block of THREADS threads
// per row, scalar loads, a shared-memory tree reduction.
#include "naive.cuh"

#define THREADS 128

extern "C" __global__ void __launch_bounds__(128)
rmsnorm_naive(elem_t* __restrict__ out, const elem_t* __restrict__ x, const elem_t* __restrict__ w,
              int H, float eps) {
    __shared__ float partial[THREADS];
    const elem_t* xr = x + (long long)blockIdx.x * H;
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += THREADS) {
        const float v = load_f(xr[i]);
        ss += v * v;
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = rsqrtf(partial[0] / H + eps);
    elem_t* orow = out + (long long)blockIdx.x * H;
    for (int i = threadIdx.x; i < H; i += THREADS) {
        orow[i] = store_f(load_f(xr[i]) * inv * load_f(w[i]));
    }
}
