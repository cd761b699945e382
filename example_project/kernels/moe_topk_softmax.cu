// MoE top-k softmax gating: for each row t of gating [T, NUM_EXPERTS] (float32 logits),
// p = softmax(row); the TOPK largest logits, in descending order, ties to the lower index, give
// ids[t, :] (int32) and weights[t, :] = p[ids] (float32), divided by their sum when RENORM.
// TPR consecutive threads share a row (BLOCK/TPR rows per block). A thread holds the logits of its
// VPT-wide slices lane, lane + TPR, ... in registers; row maxima and sums are warp shuffles, and
// across warps (TPR > 32) a pass through shared memory. Each of the TOPK rounds picks the best
// logit not yet taken, by the same reduction over (logit, index) pairs.
#define E NUM_EXPERTS
#define NV (E / VPT)                         // VPT-wide slices per row
#define SLICES ((NV + TPR - 1) / TPR)        // slices per thread
#define PER (SLICES * VPT)                   // logits per thread (at most 32: one bit each below)
#define WARP_LANES (TPR < 32 ? TPR : 32)
#define NEG_INF __uint_as_float(0xff800000u)  // NVRTC has no math.h, so no INFINITY

template <int N>
struct __align__(4 * N) floats_t {
    float v[N];
};

struct best_t {  // a candidate expert: its logit and index
    float v;
    int i;
};

struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct BetterOp {  // the higher logit; of equal logits, the lower index
    __device__ best_t operator()(best_t a, best_t b) const {
        return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
    }
};

__device__ __forceinline__ float shfl_xor(float x, int o) { return __shfl_xor_sync(0xffffffffu, x, o); }
__device__ __forceinline__ best_t shfl_xor(best_t x, int o) {
    return best_t{__shfl_xor_sync(0xffffffffu, x.v, o), __shfl_xor_sync(0xffffffffu, x.i, o)};
}

// Combine x over the TPR threads of a row; every one of them gets the result. All threads of the
// block must call it together (it may synchronise the block).
template <typename T, typename Op>
__device__ __forceinline__ T row_reduce(T x, Op op) {
#pragma unroll
    for (int o = WARP_LANES / 2; o > 0; o >>= 1) x = op(x, shfl_xor(x, o));
#if TPR > 32
    __shared__ T part[BLOCK / 32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
    __syncthreads();
    const int first = (threadIdx.x / TPR) * (TPR / 32);
    x = part[first];
#pragma unroll
    for (int w = 1; w < TPR / 32; ++w) x = op(x, part[first + w]);
    __syncthreads();  // before the next call writes part again
#endif
    return x;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
moe_topk_softmax(float* __restrict__ weights, int* __restrict__ ids,
                 const float* __restrict__ gating, int T) {
    typedef floats_t<VPT> V;
    const int lane = threadIdx.x % TPR;
    const int t = blockIdx.x * (BLOCK / TPR) + threadIdx.x / TPR;
    const bool live = t < T;
    const V* row = reinterpret_cast<const V*>(gating + (size_t)(live ? t : 0) * E);

    float v[PER];
    unsigned taken = 0u;  // bit s: slot s is taken, or holds no expert
    float m = NEG_INF;
#pragma unroll
    for (int j = 0; j < SLICES; ++j) {
        const int c = lane + j * TPR;
        V a;
        if (live && c < NV) a = row[c];
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int s = j * VPT + k;
            if (live && c < NV) {
                v[s] = a.v[k];
                m = fmaxf(m, v[s]);
            } else {
                v[s] = NEG_INF;
                taken |= 1u << s;
            }
        }
    }
    m = row_reduce(m, MaxOp());
    float sum = 0.f;
#pragma unroll
    for (int s = 0; s < PER; ++s) sum += (taken >> s) & 1u ? 0.f : expf(v[s] - m);
    const float inv = 1.f / row_reduce(sum, SumOp());

    float w[TOPK];
    int id[TOPK];
#pragma unroll
    for (int r = 0; r < TOPK; ++r) {
        best_t b{NEG_INF, 0x7fffffff};
#pragma unroll
        for (int s = 0; s < PER; ++s) {
            const int idx = (lane + (s / VPT) * TPR) * VPT + s % VPT;
            if (!((taken >> s) & 1u)) b = BetterOp()(b, best_t{v[s], idx});
        }
        b = row_reduce(b, BetterOp());
#pragma unroll
        for (int s = 0; s < PER; ++s) {  // the owner of the winner marks it taken
            if ((lane + (s / VPT) * TPR) * VPT + s % VPT == b.i) taken |= 1u << s;
        }
        w[r] = expf(b.v - m) * inv;
        id[r] = b.i;
    }
    if (!live || lane != 0) return;
    float scale = 1.f;
#if RENORM
    float total = 0.f;
#pragma unroll
    for (int r = 0; r < TOPK; ++r) total += w[r];
    scale = 1.f / total;
#endif
#pragma unroll
    for (int r = 0; r < TOPK; ++r) {
        weights[(size_t)t * TOPK + r] = w[r] * scale;
        ids[(size_t)t * TOPK + r] = id[r];
    }
}
