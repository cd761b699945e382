// 2-D convolution (the cross-correlation image filters compute):
//   out[y][x] = sum over fy < FH, fx < FW of filter[fy][fx] * in[y + fy][x + fx]
// `in` is (height + FH - 1) x (width + FW - 1), `out` is height x width, row-major.
// The filter is in constant memory (kernel.constant); each block stages the input tile it reads in
// dynamic shared memory (kernel.launch(..., shared=...)), sized from the parameters.
// Parameters: BLOCK_X x BLOCK_Y threads per block, each computing TILE_X x TILE_Y outputs, BLOCK_X
// apart in x and BLOCK_Y apart in y; READ_ONLY (CUDA only) loads the input through the read-only
// cache (__ldg). FH, FW: the filter's size, from defines=.
#ifndef READ_ONLY
#define READ_ONLY 0
#endif
#if READ_ONLY
#define LOAD(p) __ldg(p)
#else
#define LOAD(p) (*(p))
#endif

__constant__ float filter[FH * FW];

extern "C" __global__ void __launch_bounds__(BLOCK_X * BLOCK_Y)
conv2d(float* __restrict__ out, const float* __restrict__ in, int height, int width) {
    extern __shared__ float tile[];
    const int tile_w = BLOCK_X * TILE_X + FW - 1;
    const int tile_h = BLOCK_Y * TILE_Y + FH - 1;
    const int in_w = width + FW - 1, in_h = height + FH - 1;
    const int x0 = blockIdx.x * BLOCK_X * TILE_X, y0 = blockIdx.y * BLOCK_Y * TILE_Y;
    for (int i = threadIdx.y; i < tile_h; i += BLOCK_Y) {
        for (int j = threadIdx.x; j < tile_w; j += BLOCK_X) {
            const int y = y0 + i, x = x0 + j;
            tile[i * tile_w + j] = (y < in_h && x < in_w) ? LOAD(in + (size_t)y * in_w + x) : 0.0f;
        }
    }
    __syncthreads();
    float acc[TILE_Y][TILE_X];
#pragma unroll
    for (int ty = 0; ty < TILE_Y; ++ty)
#pragma unroll
        for (int tx = 0; tx < TILE_X; ++tx) acc[ty][tx] = 0.0f;
    for (int fy = 0; fy < FH; ++fy) {
        for (int fx = 0; fx < FW; ++fx) {
            const float f = filter[fy * FW + fx];
#pragma unroll
            for (int ty = 0; ty < TILE_Y; ++ty)
#pragma unroll
                for (int tx = 0; tx < TILE_X; ++tx)
                    acc[ty][tx] += f * tile[(threadIdx.y + ty * BLOCK_Y + fy) * tile_w + threadIdx.x + tx * BLOCK_X + fx];
        }
    }
#pragma unroll
    for (int ty = 0; ty < TILE_Y; ++ty) {
#pragma unroll
        for (int tx = 0; tx < TILE_X; ++tx) {
            const int y = y0 + threadIdx.y + ty * BLOCK_Y, x = x0 + threadIdx.x + tx * BLOCK_X;
            if (y < height && x < width) out[(size_t)y * width + x] = acc[ty][tx];
        }
    }
}
