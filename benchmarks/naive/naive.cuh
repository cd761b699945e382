// Storage type helpers for the naive CUDA kernels (NVRTC, no CUDA headers needed).
#pragma once

#if DTYPE_F16
typedef unsigned short elem_t;
__device__ __forceinline__ float load_f(elem_t h) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ elem_t store_f(float f) {
    unsigned short h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    return h;
}
#else
typedef float elem_t;
__device__ __forceinline__ float load_f(elem_t v) { return v; }
__device__ __forceinline__ elem_t store_f(float v) { return v; }
#endif
