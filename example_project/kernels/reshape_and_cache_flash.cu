// Write key and value [T, NKV, D] into paged caches [num_blocks, block_size, NKV, D] (flash
// layout) at the slots in slot_mapping [T] (int64; -1: a padding token, nothing written).
// A token's row of ROW = NKV * D elements lands whole at slot * ROW. A block covers TOKENS
// consecutive tokens; its threads sweep the flat range of (token, VEC-wide slice of the row)
// items, copying the key and the value slice. Parameters: BLOCK threads, VEC elements per
// load (8 in fp16 = 16 bytes), TOKENS per block.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
reshape_and_cache_flash(elem_t* __restrict__ key_cache, elem_t* __restrict__ value_cache,
                        const elem_t* __restrict__ key, const elem_t* __restrict__ value,
                        const long long* __restrict__ slot_mapping, int T, int ROW) {
    typedef vec_t<VEC> V;
    const int nv = ROW / VEC;
    const int t0 = blockIdx.x * TOKENS;
    const int tokens = min(TOKENS, T - t0);
    for (int e = threadIdx.x; e < tokens * nv; e += BLOCK) {
        const int tl = e / nv;
        const int c = e - tl * nv;
        const int t = t0 + tl;
        const long long slot = slot_mapping[t];
        if (slot < 0) continue;
        const size_t src = (size_t)t * ROW, dst = (size_t)slot * ROW;
        reinterpret_cast<V*>(key_cache + dst)[c] = reinterpret_cast<const V*>(key + src)[c];
        reinterpret_cast<V*>(value_cache + dst)[c] = reinterpret_cast<const V*>(value + src)[c];
    }
}
