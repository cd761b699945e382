// RMSNorm: out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w.
// Parameters:
//   BLOCK   threads per block;
//   VEC     elements per load and store, of x, w and out alike (16 bytes at VEC=8 in fp16 and bf16, 4 in fp32);
//   ROWS    rows per block, each by TPR = BLOCK / ROWS threads: at TPR <= 32 a warp or part of one per row,
//           reduced by shuffles alone, with no barrier;
//   CACHE   vectors of its row each thread keeps in registers from the first pass to the second (0: the
//           second pass reads the row again);
//   REDUCE  where a row spans several warps: 0 sums the warps' partials in one warp (two barriers), 1 lets
//           every warp sum them itself (one barrier);
//   PREFETCH  with CACHE: 1 loads the weights of the held vectors with the row, before the reduction, so
//           their latency hides behind it (0: after it).
// ROWS=1, CACHE=0, REDUCE=0, PREFETCH=0 is the kernel as it was before those parameters: one block per row,
// the block's sum through common.cuh's block_sum, the row read twice.
#include "common.cuh"

#define TPR (BLOCK / ROWS)

// The sum of x over the TPR threads of each row; every thread gets its row's.
__device__ __forceinline__ float row_sum(float x) {
#if TPR <= 32
    // The row's threads are TPR aligned lanes of one warp: xor offsets below TPR stay among them.
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
#elif ROWS == 1 && REDUCE == 0
    return block_sum<BLOCK>(x);
#else
    constexpr int WPR = TPR / 32;  // warps per row
    __shared__ float partial[BLOCK / 32];
    x = warp_sum(x);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = x;
    __syncthreads();
#if REDUCE == 1
    // Every warp reads its row's partials and sums them itself: no second barrier.
    const float y = lane < WPR ? partial[warp / WPR * WPR + lane] : 0.f;
    return warp_sum(y);
#else
    __shared__ float total[ROWS];
    if (warp < ROWS) {  // warp r sums row r's partials
        float y = lane < WPR ? partial[warp * WPR + lane] : 0.f;
        y = warp_sum(y);
        if (lane == 0) total[warp] = y;
    }
    __syncthreads();
    return total[threadIdx.x / TPR];
#endif
#endif
}

// ss += the squares of a's elements, one at a time (the order of the sum as it always was).
template <int N>
__device__ __forceinline__ void add_squares(float& ss, const vec_t<N>& a) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const float f = load_f(a.v[j]);
        ss += f * f;
    }
}

template <int N>
__device__ __forceinline__ vec_t<N> normed(const vec_t<N>& a, const vec_t<N>& g, float inv) {
    vec_t<N> r;
#pragma unroll
    for (int j = 0; j < N; ++j) r.v[j] = store_f(load_f(a.v[j]) * inv * load_f(g.v[j]));
    return r;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm(elem_t* __restrict__ out, const elem_t* __restrict__ x, const elem_t* __restrict__ w,
        int H, float eps, int T) {
    typedef vec_t<VEC> V;
#if ROWS == 1
    const int row = blockIdx.x, t = threadIdx.x;
    const int nv = H / VEC;
#else
    const int row = blockIdx.x * ROWS + threadIdx.x / TPR, t = threadIdx.x % TPR;
    // A row past the last reads and writes nothing, but its threads still take part in the reduction.
    const int nv = row < T ? H / VEC : 0;
#endif
    const V* xr = reinterpret_cast<const V*>(x + (size_t)row * H);
    const V* wv = reinterpret_cast<const V*>(w);
    V* orow = reinterpret_cast<V*>(out + (size_t)row * H);

    float ss = 0.f;
#if CACHE > 0
    V held[CACHE];
#if PREFETCH
    V wh[CACHE];
#endif
#pragma unroll
    for (int k = 0; k < CACHE; ++k) {
        const int i = t + k * TPR;
        if (i < nv) {
#if PREFETCH
            wh[k] = wv[i];
#endif
            held[k] = xr[i];
            add_squares(ss, held[k]);
        }
    }
#endif
    // What the registers do not hold (all of the row at CACHE=0) is read from memory.
    for (int i = t + CACHE * TPR; i < nv; i += TPR) add_squares(ss, xr[i]);
    const float inv = rsqrtf(row_sum(ss) / H + eps);
#if CACHE > 0
#pragma unroll
    for (int k = 0; k < CACHE; ++k) {
        const int i = t + k * TPR;
#if PREFETCH
        if (i < nv) orow[i] = normed(held[k], wh[k], inv);
#else
        if (i < nv) orow[i] = normed(held[k], wv[i], inv);
#endif
    }
#endif
    for (int i = t + CACHE * TPR; i < nv; i += TPR) orow[i] = normed(xr[i], wv[i], inv);
}
