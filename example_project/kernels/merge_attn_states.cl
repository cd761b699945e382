// Merge two partial attention states by their log-sum-exp: out, prefix_out, suffix_out are
// [T, NH, D]; out_lse, prefix_lse, suffix_lse are float [NH, T]. An LSE of +-inf marks an
// empty side, which gets weight 0. A work-group covers HEADS consecutive (token, head) pairs;
// its work-items sweep the flat range of (pair, VEC-wide slice of D) items. Parameters: BLOCK
// work-items, VEC elements per load, HEADS pairs per group.
#include "common.clh"

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void merge_attn_states(__global elem_t* restrict out, __global float* restrict out_lse,
                       __global const elem_t* restrict prefix_out,
                       __global const float* restrict prefix_lse,
                       __global const elem_t* restrict suffix_out,
                       __global const float* restrict suffix_lse, int T, int NH, int D) {
    const int nv = D / VEC;
    const long pairs = (long)T * NH;
    const long first = (long)get_group_id(0) * HEADS;
    for (int e = get_local_id(0); e < HEADS * nv; e += BLOCK) {
        const int hl = e / nv;
        const int c = e - hl * nv;
        const long pair = first + hl;
        if (pair >= pairs) break;  // e only grows, and so does pair
        const int token = (int)(pair / NH);
        const int head = (int)(pair - (long)token * NH);
        const size_t li = (size_t)head * T + token;
        float p = prefix_lse[li];
        float s = suffix_lse[li];
        p = isinf(p) ? -INFINITY : p;
        s = isinf(s) ? -INFINITY : s;
        const float m = fmax(p, s);
        const float pe = exp(p - m), se = exp(s - m);
        const float total = pe + se;
        const float ps = pe / total, ss = se / total;
        const size_t row = (size_t)pair * D;
        floatV a = LOADV(c, prefix_out + row);
        floatV b = LOADV(c, suffix_out + row);
        STOREV(a * ps + b * ss, c, out + row);
        if (c == 0) out_lse[li] = log(total) + m;
    }
}
