// SiLU-and-mul: out[t, i] = silu(x[t, i]) * x[t, I + i], x of shape [T, 2I], silu(g) = g / (1 + e^-g).
// Parameters:
//   BLOCK  threads per block;
//   VEC    elements per load and store (16 bytes at VEC=8 in fp16 and bf16, VEC=4 in fp32);
//   ITEMS  vectors per thread, BLOCK vectors apart;
//   ROWS   0: one flat range over the T * I / VEC vectors, each block taking BLOCK * ITEMS of them and
//          each thread finding its row by a 64-bit division; >= 1: a 2-D grid, blockIdx.x taking
//          BLOCK * ITEMS vectors of a row's I / VEC, blockIdx.y ROWS rows at once, every load of those
//          ROWS * ITEMS vectors issued before the first store, and no division;
//   FAST   1: e^-g as 2^(-g log2 e) in one ex2.approx.ftz (no rescaling of results below 2^-126, which
//          vanish beside the 1 they are added to) and the division by __fdividef (a reciprocal
//          approximation and a product) instead of IEEE division.
// With ROWS >= 1, gridDim.y may be smaller than the T / ROWS groups of rows (the launcher caps it for a
// persistent grid): each block then strides over them.
// ROWS=0, FAST=0 is the kernel as it was before ROWS and FAST.
#include "common.cuh"

#if FAST
// 2^x in one special-function instruction, results below 2^-126 flushed to zero.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif

__device__ __forceinline__ float silu_mul(float g, float u) {
#if FAST
    return __fdividef(g, 1.f + exp2_ftz(g * -1.4426950408889634f)) * u;  // -1 / ln 2
#else
    return g / (1.f + __expf(-g)) * u;
#endif
}

#if ROWS == 0
extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul(elem_t* __restrict__ out, const elem_t* __restrict__ x, long long T, int I) {
    typedef vec_t<VEC> V;
    const long long nv = I / VEC;
    const long long total = T * nv;
    const long long first = (long long)blockIdx.x * BLOCK * ITEMS + threadIdx.x;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const long long e = first + (long long)it * BLOCK;
        if (e < total) {
            const long long row = e / nv;
            const long long c = e - row * nv;
            const V a = reinterpret_cast<const V*>(x + row * 2 * I)[c];
            const V b = reinterpret_cast<const V*>(x + row * 2 * I + I)[c];
            V r;
#pragma unroll
            for (int j = 0; j < VEC; ++j) r.v[j] = store_f(silu_mul(load_f(a.v[j]), load_f(b.v[j])));
            reinterpret_cast<V*>(out + row * I)[c] = r;
        }
    }
}
#else
extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul(elem_t* __restrict__ out, const elem_t* __restrict__ x, long long T, int I) {
    typedef vec_t<VEC> V;
    const int nv = I / VEC;
    const int first = blockIdx.x * (BLOCK * ITEMS) + threadIdx.x;
    for (long long r0 = (long long)blockIdx.y * ROWS; r0 < T; r0 += (long long)gridDim.y * ROWS) {
        V a[ROWS][ITEMS], b[ROWS][ITEMS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const V* g = reinterpret_cast<const V*>(x + (r0 + r) * 2 * I);
            const V* u = reinterpret_cast<const V*>(x + (r0 + r) * 2 * I + I);
#pragma unroll
            for (int it = 0; it < ITEMS; ++it) {
                const int c = first + it * BLOCK;
                if (r0 + r < T && c < nv) {
                    a[r][it] = g[c];
                    b[r][it] = u[c];
                }
            }
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            V* o = reinterpret_cast<V*>(out + (r0 + r) * I);
#pragma unroll
            for (int it = 0; it < ITEMS; ++it) {
                const int c = first + it * BLOCK;
                if (r0 + r < T && c < nv) {
                    V y;
#pragma unroll
                    for (int j = 0; j < VEC; ++j)
                        y.v[j] = store_f(silu_mul(load_f(a[r][it].v[j]), load_f(b[r][it].v[j])));
                    o[c] = y;
                }
            }
        }
    }
}
#endif
