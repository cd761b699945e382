// Fused residual-add + RMSNorm: residual[t, :] += x[t, :] (in place), then
// out[t, :] = residual[t, :] / sqrt(mean(residual[t, :]^2) + eps) * w.
// One block per row. Parameters: BLOCK threads per block, VEC elements per load.
// The second pass re-reads the row each thread itself wrote (no barrier needed), so
// the output is normalised from the stored (rounded) residual.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
fused_add_rmsnorm(elem_t* __restrict__ out, elem_t* __restrict__ residual,
                  const elem_t* __restrict__ x, const elem_t* __restrict__ w, int H, float eps) {
    typedef vec_t<VEC> V;
    const int nv = H / VEC;
    const size_t row = (size_t)blockIdx.x * H;
    const V* xr = reinterpret_cast<const V*>(x + row);
    V* rr = reinterpret_cast<V*>(residual + row);
    const V* wv = reinterpret_cast<const V*>(w);
    V* orow = reinterpret_cast<V*>(out + row);

    float ss = 0.f;
    for (int i = threadIdx.x; i < nv; i += BLOCK) {
        const V a = xr[i];
        const V r = rr[i];
        V z;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            z.v[j] = store_f(load_f(r.v[j]) + load_f(a.v[j]));
            const float f = load_f(z.v[j]);
            ss += f * f;
        }
        rr[i] = z;
    }
    const float inv = rsqrtf(block_sum<BLOCK>(ss) / H + eps);
    for (int i = threadIdx.x; i < nv; i += BLOCK) {
        const V z = rr[i], g = wv[i];
        V o;
#pragma unroll
        for (int j = 0; j < VEC; ++j) o.v[j] = store_f(load_f(z.v[j]) * inv * load_f(g.v[j]));
        orow[i] = o;
    }
}
