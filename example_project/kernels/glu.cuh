// The indexing the gated activations share (SiLU-and-mul, GELU(tanh)-and-mul):
// out[t, i] = act(x[t, i], x[t, I + i]) for x of shape [T, 2I], out of shape [T, I].
// Parameters (the including kernel's space):
//   BLOCK  threads per block;
//   VEC    elements per load and store (16 bytes at VEC=8 in fp16 and bf16, VEC=4 in fp32);
//   ITEMS  vectors per thread, BLOCK vectors apart (each pass of the block over them is coalesced);
//   ROWS   0: one flat range over the T * I / VEC vectors, each block taking BLOCK * ITEMS of them and
//          each thread finding its row by a division; >= 1: a 2-D grid, blockIdx.x taking BLOCK * ITEMS
//          vectors of a row's I / VEC, blockIdx.y ROWS rows at once, every load of those ROWS * ITEMS
//          vectors issued before the first store, and no division.
// Defines (the target's defines function, from the call's arrays):
//   KI     the row's width I, fixed at compile time (the key's I): the division, the bounds and the
//          addresses are by a constant, as a compiler that sees static shapes makes them; 0: I as passed;
//   IDX64  1: 64-bit indices (x of 2^31 elements or more); 0: 32-bit ones, fewer instructions a vector.
// With ROWS >= 1, gridDim.y may be smaller than the T / ROWS groups of rows (the launcher caps it for a
// persistent grid): each block then strides over them.
#pragma once
#include "common.cuh"

#ifndef KI
#define KI 0
#endif
#ifndef IDX64
#define IDX64 1
#endif
#if IDX64
typedef long long idx_t;
#else
typedef int idx_t;
#endif

template <typename Act>
__device__ __forceinline__ void glu(elem_t* __restrict__ out, const elem_t* __restrict__ x, idx_t T, int I_arg,
                                    Act act) {
    typedef vec_t<VEC> V;
#if KI
    constexpr idx_t I = KI;
#else
    const idx_t I = I_arg;
#endif
    const idx_t nv = I / VEC;
#if ROWS == 0
    const idx_t total = T * nv;
    const idx_t first = (idx_t)blockIdx.x * BLOCK * ITEMS + threadIdx.x;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const idx_t e = first + (idx_t)it * BLOCK;
        if (e < total) {
            const idx_t row = e / nv;
            const idx_t c = e - row * nv;
            const V a = reinterpret_cast<const V*>(x + row * 2 * I)[c];
            const V b = reinterpret_cast<const V*>(x + row * 2 * I + I)[c];
            V r;
#pragma unroll
            for (int j = 0; j < VEC; ++j) r.v[j] = store_f(act(load_f(a.v[j]), load_f(b.v[j])));
            reinterpret_cast<V*>(out + row * I)[c] = r;
        }
    }
#else
    const int first = blockIdx.x * (BLOCK * ITEMS) + threadIdx.x;
    for (idx_t r0 = (idx_t)blockIdx.y * ROWS; r0 < T; r0 += (idx_t)gridDim.y * ROWS) {
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
                    for (int j = 0; j < VEC; ++j) y.v[j] = store_f(act(load_f(a[r][it].v[j]), load_f(b[r][it].v[j])));
                    o[c] = y;
                }
            }
        }
    }
#endif
}
