// fp32 paged decode attention for x86-64 CPUs with AVX2 and FMA.
//
// kvfence_paged_decode_f32: one query token per sequence attends to the positions
// [begin[b], end[b]) of its own row of `slots` (the pool slot of every position, built from the
// sequence's block table, so a sequence reads only its own pages: I1). K and V are read straight
// from the pool, once, with no gathered copy. torch's path copies every visible K/V row of every
// layer (index_select) and reads the copies again, about three times this kernel's memory traffic,
// and a large decode batch over long contexts is bound by exactly that traffic.
//
// Work is split over the OpenMP threads torch already uses (the same libgomp, so
// torch.set_num_threads applies), unless the step reads too little to be worth waking them:
// batch-1 decode over a short context runs on the calling thread. A task is one sequence and a run
// of its KV heads: the whole row of KV heads when the batch alone keeps every thread busy (each
// pool row, all heads, is then read once and in order within a page), one KV head per task when
// the batch is small. The G = H / KV query heads that share a KV head are done together, so each
// K/V vector is loaded once for all of them (grouped-query attention). Rows a few positions ahead
// are prefetched: pages are scattered in the pool, so the hardware prefetcher loses the stream at
// every page boundary.
//
// Softmax is exact (scores kept, max subtracted, then normalised), in float32.
// Compiled with -ffp-contract=off like the other kernels, so rounding matches separate ops.
//
// Layouts: q [B, H, D] with row stride q_stride; k_cache, v_cache [num_slots, KV, D] contiguous;
// slots [B, slots_stride] int64; begin, end [B] int64; out [B, H, D] contiguous.
// Built at first use by kvfence/engine/kernels/build.py; called through ctypes. No torch headers.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "simd.h"

namespace {

constexpr long kPrefetchRows = 4;      // positions ahead whose K/V rows are prefetched
constexpr long kTasksPerThread = 4;    // whole-row tasks once the batch gives each thread this many
constexpr long kMinParallelFloats = 1L << 17;  // K+V floats read below which one thread does it all

inline float dot(const float* a, const float* b, long d) {
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    long i = 0;
    for (; i + 16 <= d; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= d; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    float s = horizontal_sum(_mm256_add_ps(acc0, acc1));
    for (; i < d; ++i) s += a[i] * b[i];
    return s;
}

// acc[0:d] += w * v[0:d]
inline void axpy(float* acc, float w, const float* v, long d) {
    const __m256 wv = _mm256_set1_ps(w);
    long i = 0;
    for (; i + 8 <= d; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(acc + i)));
    for (; i < d; ++i) acc[i] += w * v[i];
}

inline void prefetch(const float* p, long floats) {
    const char* c = reinterpret_cast<const char*>(p);
    for (long off = 0; off < floats * 4; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

struct Shape {
    long heads, kv_heads, head_dim, group;  // group = heads / kv_heads
};

// Query heads [kv_first * group, (kv_first + kv_count) * group) of one sequence. q and out point at
// the sequence's first query head; slots at its row, already offset by begin.
void attend(const Shape& s, const float* q, float* out, long kv_first, long kv_count, const float* k_cache,
            const float* v_cache, const long* slots, long length, float scale, std::vector<float>& scores) {
    const long d = s.head_dim;
    const long h_first = kv_first * s.group;
    const long h_count = kv_count * s.group;
    float* o = out + h_first * d;
    if (length <= 0) {  // nothing visible (never the case in decode: a token sees itself)
        std::fill(o, o + h_count * d, 0.0f);
        return;
    }
    const long row = s.kv_heads * d;
    const long span = kv_count * d;  // the floats of one pool row this task reads
    scores.resize(static_cast<size_t>(h_count * (length + 1)));
    float* maxima = scores.data() + h_count * length;  // per head, after the scores
    std::fill(maxima, maxima + h_count, -INFINITY);
    for (long p = 0; p < length; ++p) {
        if (p + kPrefetchRows < length) prefetch(k_cache + slots[p + kPrefetchRows] * row + kv_first * d, span);
        const float* k = k_cache + slots[p] * row;
        for (long h = 0; h < h_count; ++h) {
            const long kv = kv_first + h / s.group;
            const float x = dot(q + (h_first + h) * d, k + kv * d, d) * scale;
            scores[h * length + p] = x;
            maxima[h] = std::max(maxima[h], x);
        }
    }
    std::fill(o, o + h_count * d, 0.0f);
    for (long h = 0; h < h_count; ++h) {
        float* x = scores.data() + h * length;
        float total = 0.0f;
        for (long p = 0; p < length; ++p) {
            x[p] = std::exp(x[p] - maxima[h]);
            total += x[p];
        }
        maxima[h] = 1.0f / total;  // reused: the normaliser
    }
    for (long p = 0; p < length; ++p) {
        if (p + kPrefetchRows < length) prefetch(v_cache + slots[p + kPrefetchRows] * row + kv_first * d, span);
        const float* v = v_cache + slots[p] * row;
        for (long h = 0; h < h_count; ++h) {
            const long kv = kv_first + h / s.group;
            axpy(o + h * d, scores[h * length + p], v + kv * d, d);
        }
    }
    for (long h = 0; h < h_count; ++h)
        for (long i = 0; i < d; ++i) o[h * d + i] *= maxima[h];
}

}  // namespace

extern "C" {

// Returns 0, or 1 when heads is not a multiple of kv_heads.
int kvfence_paged_decode_f32(const float* q, long q_stride, long batch, long heads, long kv_heads, long head_dim,
                             const float* k_cache, const float* v_cache, const long* slots, long slots_stride,
                             const long* begin, const long* end, float scale, float* out) {
    if (kv_heads < 1 || heads % kv_heads != 0) return 1;
    const Shape shape{heads, kv_heads, head_dim, heads / kv_heads};
    long threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    const long split = batch >= kTasksPerThread * threads ? 1 : kv_heads;  // tasks per sequence
    const long per_task = kv_heads / split;
    const long tasks = batch * split;
    long visible = 0;
    for (long b = 0; b < batch; ++b) visible += end[b] - begin[b];
    // Waking the other threads costs microseconds when idle and much more when a thread has been
    // descheduled on a busy machine (a parallel region ends at a barrier): small work stays here.
    const bool parallel = tasks > 1 && threads > 1 && 2 * visible * kv_heads * head_dim >= kMinParallelFloats;
#pragma omp parallel if (parallel)
    {
        std::vector<float> scores;
#pragma omp for schedule(dynamic, 1)
        for (long t = 0; t < tasks; ++t) {
            const long b = t / split;
            const long first = (t % split) * per_task;
            attend(shape, q + b * q_stride, out + b * heads * head_dim, first, per_task, k_cache, v_cache,
                   slots + b * slots_stride + begin[b], end[b] - begin[b], scale, scores);
        }
    }
    return 0;
}

}  // extern "C"
