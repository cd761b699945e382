// Write key and value [T, NKV, D] into paged caches [num_blocks, block_size, NKV, D] (flash
// layout) at the slots in slot_mapping [T] (long; -1: a padding token, nothing written).
// A token's row of ROW = NKV * D elements lands whole at slot * ROW. A work-group covers
// TOKENS consecutive tokens; its work-items sweep the flat range of (token, VEC-wide slice of
// the row) items. Parameters: BLOCK work-items, VEC elements per access, TOKENS per group.
// Elements are copied as raw storage (ushort for fp16), so a copy is exact.
#include "common.clh"

#if DTYPE_F16
#define raw_t ushort
#else
#define raw_t uint
#endif
#if VEC == 1
typedef raw_t rawV;
#define LOADR(i, p) ((p)[(i)])
#define STORER(v, i, p) ((p)[(i)] = (v))
#else
typedef CAT(raw_t, VEC) rawV;
#define LOADR(i, p) CAT(vload, VEC)((i), (p))
#define STORER(v, i, p) CAT(vstore, VEC)((v), (i), (p))
#endif

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void reshape_and_cache_flash(__global raw_t* restrict key_cache, __global raw_t* restrict value_cache,
                             __global const raw_t* restrict key, __global const raw_t* restrict value,
                             __global const long* restrict slot_mapping, int T, int ROW) {
    const int nv = ROW / VEC;
    const int t0 = get_group_id(0) * TOKENS;
    const int tokens = min(TOKENS, T - t0);
    for (int e = get_local_id(0); e < tokens * nv; e += BLOCK) {
        const int tl = e / nv;
        const int c = e - tl * nv;
        const int t = t0 + tl;
        const long slot = slot_mapping[t];
        if (slot < 0) continue;
        const size_t src = (size_t)t * ROW, dst = (size_t)slot * ROW;
        rawV k = LOADR(c, key + src);
        rawV v = LOADR(c, value + src);
        STORER(k, c, key_cache + dst);
        STORER(v, c, value_cache + dst);
    }
}
