// Scripted agent template for the naive RMSNorm: VEC-wide aligned loads, THREADS threads per row,
// a warp-shuffle reduction (THREADS a multiple of 32).
#include "naive.cuh"

template <int N>
struct __align__(sizeof(elem_t) * N) vec_t {
    elem_t v[N];
};

extern "C" __global__ void __launch_bounds__(THREADS)
rmsnorm_naive(elem_t* __restrict__ out, const elem_t* __restrict__ x, const elem_t* __restrict__ w,
              int H, float eps) {
    typedef vec_t<VEC> V;
    __shared__ float partial[32];
    const int nv = H / VEC;
    const V* xr = reinterpret_cast<const V*>(x + (long long)blockIdx.x * H);
    const V* wr = reinterpret_cast<const V*>(w);
    float ss = 0.f;
    for (int i = threadIdx.x; i < nv; i += THREADS) {
        const V a = xr[i];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float v = load_f(a.v[j]);
            ss += v * v;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
    __syncthreads();
    float total = 0.f;
#pragma unroll 1
    for (int k = 0; k < THREADS / 32; ++k) total += partial[k];
    const float inv = rsqrtf(total / H + eps);
    V* orow = reinterpret_cast<V*>(out + (long long)blockIdx.x * H);
    for (int i = threadIdx.x; i < nv; i += THREADS) {
        const V a = xr[i];
        const V b = wr[i];
        V r;
#pragma unroll
        for (int j = 0; j < VEC; ++j) r.v[j] = store_f(load_f(a.v[j]) * inv * load_f(b.v[j]));
        orow[i] = r;
    }
}
