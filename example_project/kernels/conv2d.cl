// 2-D convolution (the cross-correlation image filters compute):
//   out[y][x] = sum over fy < FH, fx < FW of filter[fy][fx] * in[y + fy][x + fx]
// `in` is (height + FH - 1) x (width + FW - 1), `out` is height x width, row-major.
// The filter is a __constant buffer (kernel.constant); each work-group stages the input tile it reads
// in __local memory passed as the last argument (kernel.launch(..., shared=...)), sized from the
// parameters. Parameters: BLOCK_X x BLOCK_Y work-items per group, each computing TILE_X x TILE_Y
// outputs, BLOCK_X apart in x and BLOCK_Y apart in y. FH, FW: the filter's size, from defines=.

__kernel __attribute__((reqd_work_group_size(BLOCK_X, BLOCK_Y, 1)))
void conv2d(__global float* restrict out, __global const float* restrict in, __constant float* filter,
            int height, int width, __local float* tile) {
    const int tile_w = BLOCK_X * TILE_X + FW - 1;
    const int tile_h = BLOCK_Y * TILE_Y + FH - 1;
    const int in_w = width + FW - 1, in_h = height + FH - 1;
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int x0 = get_group_id(0) * BLOCK_X * TILE_X, y0 = get_group_id(1) * BLOCK_Y * TILE_Y;
    for (int i = ly; i < tile_h; i += BLOCK_Y) {
        for (int j = lx; j < tile_w; j += BLOCK_X) {
            const int y = y0 + i, x = x0 + j;
            tile[i * tile_w + j] = (y < in_h && x < in_w) ? in[(size_t)y * in_w + x] : 0.0f;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float acc[TILE_Y][TILE_X];
    for (int ty = 0; ty < TILE_Y; ++ty)
        for (int tx = 0; tx < TILE_X; ++tx) acc[ty][tx] = 0.0f;
    for (int fy = 0; fy < FH; ++fy) {
        for (int fx = 0; fx < FW; ++fx) {
            const float f = filter[fy * FW + fx];
            for (int ty = 0; ty < TILE_Y; ++ty)
                for (int tx = 0; tx < TILE_X; ++tx)
                    acc[ty][tx] += f * tile[(ly + ty * BLOCK_Y + fy) * tile_w + lx + tx * BLOCK_X + fx];
        }
    }
    for (int ty = 0; ty < TILE_Y; ++ty) {
        for (int tx = 0; tx < TILE_X; ++tx) {
            const int y = y0 + ly + ty * BLOCK_Y, x = x0 + lx + tx * BLOCK_X;
            if (y < height && x < width) out[(size_t)y * width + x] = acc[ty][tx];
        }
    }
}
