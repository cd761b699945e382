// Rotary embedding, NeoX style (rotate halves), in place on query [T, Hq, D] and
// key [T, Hk, D], with cos and sin caches [max_pos, D/2] indexed by positions [T].
// For a = v[i], b = v[i + D/2]:  v[i] = a*cos - b*sin,  v[i + D/2] = b*cos + a*sin.
// A block covers TOKENS consecutive tokens; its threads sweep the flat range of
// (token, head, VEC-wide slice of the half head) items. Parameters: BLOCK threads,
// VEC elements per load (D % (2 * VEC) == 0 keeps every load aligned), TOKENS per block.
#include "common.cuh"

#if POS_I64
typedef long long pos_t;
#else
typedef int pos_t;
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
rotary_neox(elem_t* __restrict__ query, elem_t* __restrict__ key, const elem_t* __restrict__ cos,
            const elem_t* __restrict__ sin, const pos_t* __restrict__ positions, int T, int Hq,
            int Hk, int D) {
    typedef vec_t<VEC> V;
    const int half_d = D / 2;
    const int nv = half_d / VEC;            // vectors per half_d head
    const int per_token = (Hq + Hk) * nv;
    const int t0 = blockIdx.x * TOKENS;
    const int tokens = min(TOKENS, T - t0);
    const int items = tokens * per_token;
    for (int e = threadIdx.x; e < items; e += BLOCK) {
        const int tl = e / per_token;
        const int r = e - tl * per_token;
        const int head = r / nv;
        const int c = r - head * nv;
        const int t = t0 + tl;
        elem_t* v = head < Hq ? query + ((size_t)t * Hq + head) * D
                              : key + ((size_t)t * Hk + (head - Hq)) * D;
        const size_t crow = (size_t)positions[t] * half_d;
        const V cv = reinterpret_cast<const V*>(cos + crow)[c];
        const V sv = reinterpret_cast<const V*>(sin + crow)[c];
        V* lo = reinterpret_cast<V*>(v);
        V* hi = reinterpret_cast<V*>(v + half_d);
        const V a = lo[c], b = hi[c];
        V na, nb;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float fc = load_f(cv.v[j]), fs = load_f(sv.v[j]);
            const float fa = load_f(a.v[j]), fb = load_f(b.v[j]);
            na.v[j] = store_f(fa * fc - fb * fs);
            nb.v[j] = store_f(fb * fc + fa * fs);
        }
        lo[c] = na;
        hi[c] = nb;
    }
}
