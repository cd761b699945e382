// RMSNorm: out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w.
// One block per row. Parameters: BLOCK threads per block, VEC elements per load.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm(elem_t* __restrict__ out, const elem_t* __restrict__ x, const elem_t* __restrict__ w,
        int H, float eps) {
    typedef vec_t<VEC> V;
    const int nv = H / VEC;
    const V* xr = reinterpret_cast<const V*>(x + (size_t)blockIdx.x * H);
    const V* wv = reinterpret_cast<const V*>(w);
    V* orow = reinterpret_cast<V*>(out + (size_t)blockIdx.x * H);

    float ss = 0.f;
    for (int i = threadIdx.x; i < nv; i += BLOCK) {
        V a = xr[i];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            float f = load_f(a.v[j]);
            ss += f * f;
        }
    }
    const float inv = rsqrtf(block_sum<BLOCK>(ss) / H + eps);
    for (int i = threadIdx.x; i < nv; i += BLOCK) {
        V a = xr[i], g = wv[i], r;
#pragma unroll
        for (int j = 0; j < VEC; ++j) r.v[j] = store_f(load_f(a.v[j]) * inv * load_f(g.v[j]));
        orow[i] = r;
    }
}
