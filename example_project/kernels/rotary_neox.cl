// Rotary embedding, NeoX style (rotate halves), in place on query [T, Hq, D] and
// key [T, Hk, D], with cos and sin caches [max_pos, D/2] indexed by positions [T].
// For a = v[i], b = v[i + D/2]:  v[i] = a*cos - b*sin,  v[i + D/2] = b*cos + a*sin.
// A work-group covers TOKENS consecutive tokens; its work-items sweep the flat range of
// (token, head, VEC-wide slice of the half head) items. Parameters: BLOCK work-items,
// VEC elements per load, TOKENS per group.
#include "common.clh"

#if POS_I64
typedef long pos_t;
#else
typedef int pos_t;
#endif

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void rotary_neox(__global elem_t* restrict query, __global elem_t* restrict key,
                 __global const elem_t* restrict cos_c, __global const elem_t* restrict sin_c,
                 __global const pos_t* restrict positions, int T, int Hq, int Hk, int D) {
    const int half_d = D / 2;
    const int nv = half_d / VEC;
    const int per_token = (Hq + Hk) * nv;
    const int t0 = get_group_id(0) * TOKENS;
    const int tokens = min(TOKENS, T - t0);
    const int items = tokens * per_token;
    for (int e = get_local_id(0); e < items; e += BLOCK) {
        const int tl = e / per_token;
        const int r = e - tl * per_token;
        const int head = r / nv;
        const int c = r - head * nv;
        const int t = t0 + tl;
        __global elem_t* v = head < Hq ? query + ((size_t)t * Hq + head) * D
                                       : key + ((size_t)t * Hk + (head - Hq)) * D;
        const size_t crow = (size_t)positions[t] * half_d;
        floatV fc = LOADV(c, cos_c + crow);
        floatV fs = LOADV(c, sin_c + crow);
        floatV a = LOADV(c, v);
        floatV b = LOADV(c, v + half_d);
        STOREV(a * fc - b * fs, c, v);
        STOREV(b * fc + a * fs, c, v + half_d);
    }
}
