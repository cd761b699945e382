// Shared helpers for the example CUDA templates (NVRTC, no CUDA headers needed).
#pragma once

__device__ __forceinline__ float h2f(unsigned short h) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short f2h(float f) {
    unsigned short h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    return h;
}

// bfloat16 is the top half of a float32: widening is a shift, narrowing rounds to nearest even.
__device__ __forceinline__ float bf2f(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ unsigned short f2bf(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned short b;
    asm("{ cvt.rn.bf16.f32 %0, %1; }" : "=h"(b) : "f"(f));
    return b;
#else
    // The same rounding in integer arithmetic, for GPUs without the instruction (before sm_80).
    const unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // NaN stays NaN
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}

#if DTYPE_F16
typedef unsigned short elem_t;
__device__ __forceinline__ float load_f(elem_t v) { return h2f(v); }
__device__ __forceinline__ elem_t store_f(float v) { return f2h(v); }
#elif DTYPE_BF16
typedef unsigned short elem_t;
__device__ __forceinline__ float load_f(elem_t v) { return bf2f(v); }
__device__ __forceinline__ elem_t store_f(float v) { return f2bf(v); }
#else
typedef float elem_t;
__device__ __forceinline__ float load_f(elem_t v) { return v; }
__device__ __forceinline__ elem_t store_f(float v) { return v; }
#endif

// VEC elements loaded or stored as one aligned access (16 bytes at VEC=8 in fp16 and bf16, VEC=4 in
// fp32).
template <int N>
struct __align__(sizeof(elem_t) * N) vec_t {
    elem_t v[N];
};

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Sum over a block of BLOCK threads (a multiple of 32); every thread gets the total.
template <int BLOCK_>
__device__ __forceinline__ float block_sum(float x) {
    __shared__ float partial[32];
    __shared__ float total;
    x = warp_sum(x);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = x;
    __syncthreads();
    if (warp == 0) {
        float y = lane < BLOCK_ / 32 ? partial[lane] : 0.f;
        y = warp_sum(y);
        if (lane == 0) total = y;
    }
    __syncthreads();
    return total;
}
