// MoE top-k softmax gating: for each row t of gating [T, NUM_EXPERTS] (float32 logits),
// p = softmax(row); the TOPK largest logits, in descending order, ties to the lower index, give
// ids[t, :] (int32) and weights[t, :] = p[ids] (float32), divided by their sum when RENORM.
// TPR consecutive work-items share a row (BLOCK/TPR rows per work-group). A work-item holds the
// logits of its VPT-wide slices lane, lane + TPR, ... in private memory; row maxima, sums and each
// of the TOPK rounds' best (logit, index) are trees in local memory.
#define E NUM_EXPERTS
#define NV (E / VPT)                         // VPT-wide slices per row
#define SLICES ((NV + TPR - 1) / TPR)        // slices per work-item
#define PER (SLICES * VPT)                   // logits per work-item (at most 32: one bit each below)

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

// VPT logits at slice i of p into the private array dst.
#if VPT == 1
#define LOAD_SLICE(i, p, dst) ((dst)[0] = (p)[(i)])
#else
#define LOAD_SLICE(i, p, dst) CAT(vstore, VPT)(CAT(vload, VPT)((i), (p)), 0, (dst))
#endif

// The higher logit; of equal logits, the lower index.
#define BETTER(v, i, bv, bi) ((v) > (bv) || ((v) == (bv) && (i) < (bi)))

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void moe_topk_softmax(__global float* restrict weights, __global int* restrict ids,
                      __global const float* restrict gating, int T) {
    __local float redf[BLOCK];
    __local int redi[BLOCK];
    const int lid = get_local_id(0);
    const int lane = lid % TPR;
    const int base = lid - lane;  // the row's first work-item
    const int t = get_group_id(0) * (BLOCK / TPR) + lid / TPR;
    const int live = t < T;
    __global const float* row = gating + (size_t)(live ? t : 0) * E;

    float v[PER];
    uint taken = 0u;  // bit s: slot s is taken, or holds no expert
    float m = -INFINITY;
    for (int j = 0; j < SLICES; ++j) {
        const int c = lane + j * TPR;
        if (live && c < NV) {
            LOAD_SLICE(c, row, v + j * VPT);
            for (int k = 0; k < VPT; ++k) m = fmax(m, v[j * VPT + k]);
        } else {
            for (int k = 0; k < VPT; ++k) {
                v[j * VPT + k] = -INFINITY;
                taken |= 1u << (j * VPT + k);
            }
        }
    }

    redf[lid] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = TPR / 2; s > 0; s >>= 1) {
        if (lane < s) redf[lid] = fmax(redf[lid], redf[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = redf[base];
    barrier(CLK_LOCAL_MEM_FENCE);

    float sum = 0.f;
    for (int s = 0; s < PER; ++s) sum += (taken >> s) & 1u ? 0.f : exp(v[s] - m);
    redf[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = TPR / 2; s > 0; s >>= 1) {
        if (lane < s) redf[lid] += redf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float inv = 1.f / redf[base];
    barrier(CLK_LOCAL_MEM_FENCE);

    float w[TOPK];
    int id[TOPK];
    for (int r = 0; r < TOPK; ++r) {
        float bv = -INFINITY;
        int bi = 0x7fffffff;
        for (int s = 0; s < PER; ++s) {
            const int idx = (lane + (s / VPT) * TPR) * VPT + s % VPT;
            if (!((taken >> s) & 1u) && BETTER(v[s], idx, bv, bi)) {
                bv = v[s];
                bi = idx;
            }
        }
        redf[lid] = bv;
        redi[lid] = bi;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = TPR / 2; s > 0; s >>= 1) {
            if (lane < s && BETTER(redf[lid + s], redi[lid + s], redf[lid], redi[lid])) {
                redf[lid] = redf[lid + s];
                redi[lid] = redi[lid + s];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        bv = redf[base];
        bi = redi[base];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = 0; s < PER; ++s) {  // the owner of the winner marks it taken
            if ((lane + (s / VPT) * TPR) * VPT + s % VPT == bi) taken |= 1u << s;
        }
        w[r] = exp(bv - m) * inv;
        id[r] = bi;
    }
    if (!live || lane != 0) return;
    float scale = 1.f;
#if RENORM
    float total = 0.f;
    for (int r = 0; r < TOPK; ++r) total += w[r];
    scale = 1.f / total;
#endif
    for (int r = 0; r < TOPK; ++r) {
        weights[(size_t)t * TOPK + r] = w[r] * scale;
        ids[(size_t)t * TOPK + r] = id[r];
    }
}
