// Merge two partial attention states by their log-sum-exp: out, prefix_out, suffix_out are
// [T, NH, D]; out_lse, prefix_lse, suffix_lse are float [NH, T]. An LSE of +-inf marks an
// empty side, which gets weight 0. A block covers HEADS consecutive (token, head) pairs;
// its threads sweep the flat range of (pair, VEC-wide slice of D) items. Parameters: BLOCK
// threads, VEC elements per load (8 in fp16 = 16 bytes), HEADS pairs per block.
#include "common.cuh"

__device__ __forceinline__ float empty_as_neg_inf(float lse) {
    const float inf = __int_as_float(0x7f800000);
    return fabsf(lse) == inf ? -inf : lse;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
merge_attn_states(elem_t* __restrict__ out, float* __restrict__ out_lse,
                  const elem_t* __restrict__ prefix_out, const float* __restrict__ prefix_lse,
                  const elem_t* __restrict__ suffix_out, const float* __restrict__ suffix_lse,
                  int T, int NH, int D) {
    typedef vec_t<VEC> V;
    const int nv = D / VEC;
    const long long pairs = (long long)T * NH;
    const long long first = (long long)blockIdx.x * HEADS;
    for (int e = threadIdx.x; e < HEADS * nv; e += BLOCK) {
        const int hl = e / nv;
        const int c = e - hl * nv;
        const long long pair = first + hl;
        if (pair >= pairs) break;  // e only grows, and so does pair
        const int token = (int)(pair / NH);
        const int head = (int)(pair - (long long)token * NH);
        const size_t li = (size_t)head * T + token;
        const float p = empty_as_neg_inf(prefix_lse[li]);
        const float s = empty_as_neg_inf(suffix_lse[li]);
        const float m = fmaxf(p, s);
        const float pe = expf(p - m), se = expf(s - m);
        const float total = pe + se;
        const float ps = pe / total, ss = se / total;
        const size_t row = (size_t)pair * D;
        const V a = reinterpret_cast<const V*>(prefix_out + row)[c];
        const V b = reinterpret_cast<const V*>(suffix_out + row)[c];
        V r;
#pragma unroll
        for (int j = 0; j < VEC; ++j) r.v[j] = store_f(load_f(a.v[j]) * ps + load_f(b.v[j]) * ss);
        reinterpret_cast<V*>(out + row)[c] = r;
        if (c == 0) out_lse[li] = logf(total) + m;
    }
}
