// Paged decode attention and the K/V write, shared by paged_attention_f32.cpp (the per-layer entry
// points) and decode_f32.cpp (a whole decode step in one call, kvfence_decode_step_f32). build.py
// hashes this header with each kernel's source. See paged_attention_f32.cpp for the design.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "simd.h"

namespace kvfence_attention {

constexpr long kPrefetchRows = 4;      // positions ahead whose K/V rows are prefetched
constexpr long kTasksPerThread = 4;    // whole-row tasks once the batch gives each thread this many
constexpr long kMinParallelBytes = 1L << 19;  // K+V bytes read below which one thread does it all

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

template <typename T>
inline void prefetch(const T* p, long elements) {
    const char* c = reinterpret_cast<const char*>(p);
    for (long off = 0; off < elements * static_cast<long>(sizeof(T)); off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

// Element types of the pool: float32, and bfloat16 / float16 as their raw 16 bits.
struct bf16_t { unsigned short bits; };
struct f16_t { unsigned short bits; };

// Eight consecutive K/V elements as float32.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const bf16_t* p) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));  // exact
}
inline __m256 load8(const f16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));  // exact
}

struct Shape {
    long heads, kv_heads, head_dim, group;  // group = heads / kv_heads
};

// Query heads [kv_first * group, (kv_first + kv_count) * group) of one sequence. q and out point at
// the sequence's first query head; slots at its row, already offset by begin.
inline void attend(const Shape& s, const float* q, float* out, long kv_first, long kv_count, const float* k_cache,
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

// ---- head_dim a multiple of 8: the vector path ------------------------------------------------
//
// The scalar path above spends its time on a horizontal sum per score, a scalar expf per score and
// a load and store of the output per position. Here eight positions' scores come out of one
// transposing reduction, exp is vectorised (exp_clamped), and each head's output stays in
// registers across the positions. Measured on one core (busy machine, 9 heads over 3 KV heads,
// head_dim 64, ~450 positions): 2.0-2.7x the scalar path when the K/V rows are in cache, equal
// (~3.5 ms per layer for 24 sequences, 4-5 GB/s) when they come from memory, which then bounds both.

#define KV_UNROLL _Pragma("GCC unroll 16")

// out[0 : 8 * ND] = sum_p w[p] * rows[p][0 : 8 * ND] with rows[p] = v_cache + slots[p] * row + offset.
template <int ND, typename T>
inline void weighted_rows(const float* w, const T* v_cache, const long* slots, long row, long offset,
                          long length, float norm, float* out) {
    __m256 acc[ND];
    KV_UNROLL for (int c = 0; c < ND; ++c) acc[c] = _mm256_setzero_ps();
    for (long p = 0; p < length; ++p) {
        if (p + kPrefetchRows < length) prefetch(v_cache + slots[p + kPrefetchRows] * row + offset, 8 * ND);
        const T* v = v_cache + slots[p] * row + offset;
        const __m256 wp = _mm256_broadcast_ss(w + p);
        KV_UNROLL for (int c = 0; c < ND; ++c) acc[c] = _mm256_fmadd_ps(wp, load8(v + 8 * c), acc[c]);
    }
    const __m256 nv = _mm256_set1_ps(norm);
    KV_UNROLL for (int c = 0; c < ND; ++c) _mm256_storeu_ps(out + 8 * c, _mm256_mul_ps(acc[c], nv));
}

template <typename T>
inline void weighted_rows_any(long chunks, const float* w, const T* v_cache, const long* slots, long row,
                              long offset, long length, float norm, float* out) {
    while (chunks > 0) {  // blocks of up to 8 vectors (64 floats) of the head, each kept in registers
        const long n = chunks < 8 ? chunks : 8;
        switch (n) {
            case 8: weighted_rows<8>(w, v_cache, slots, row, offset, length, norm, out); break;
            case 7: weighted_rows<7>(w, v_cache, slots, row, offset, length, norm, out); break;
            case 6: weighted_rows<6>(w, v_cache, slots, row, offset, length, norm, out); break;
            case 5: weighted_rows<5>(w, v_cache, slots, row, offset, length, norm, out); break;
            case 4: weighted_rows<4>(w, v_cache, slots, row, offset, length, norm, out); break;
            case 3: weighted_rows<3>(w, v_cache, slots, row, offset, length, norm, out); break;
            case 2: weighted_rows<2>(w, v_cache, slots, row, offset, length, norm, out); break;
            default: weighted_rows<1>(w, v_cache, slots, row, offset, length, norm, out); break;
        }
        chunks -= n;
        offset += 8 * n;
        out += 8 * n;
    }
}

template <typename T>
void attend_vec(const Shape& s, const float* q, float* out, long kv_first, long kv_count, const T* k_cache,
                const T* v_cache, const long* slots, long length, float scale, std::vector<float>& scores) {
    const long d = s.head_dim;
    const long chunks = d / 8;
    const long h_first = kv_first * s.group;
    const long h_count = kv_count * s.group;
    if (length <= 0) {
        std::fill(out + h_first * d, out + (h_first + h_count) * d, 0.0f);
        return;
    }
    const long row = s.kv_heads * d;
    const long span = kv_count * d;
    const long padded = (length + 7) / 8 * 8;
    scores.resize(static_cast<size_t>(h_count * padded));
    const __m256 scale_v = _mm256_set1_ps(scale);
    // Scores, eight positions at a time; a short last group repeats its last position (not stored).
    for (long p0 = 0; p0 < length; p0 += 8) {
        const T* k[8];
        KV_UNROLL for (int j = 0; j < 8; ++j) k[j] = k_cache + slots[p0 + j < length ? p0 + j : length - 1] * row;
        for (long j = p0 + 8; j < p0 + 16 && j < length; ++j) prefetch(k_cache + slots[j] * row + kv_first * d, span);
        for (long h = 0; h < h_count; ++h) {
            const float* qh = q + (h_first + h) * d;
            const long koff = (kv_first + h / s.group) * d;
            __m256 acc[8];
            KV_UNROLL for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
            for (long c = 0; c < chunks; ++c) {
                const __m256 qv = _mm256_loadu_ps(qh + 8 * c);
                KV_UNROLL for (int j = 0; j < 8; ++j)
                    acc[j] = _mm256_fmadd_ps(qv, load8(k[j] + koff + 8 * c), acc[j]);
            }
            _mm256_storeu_ps(scores.data() + h * padded + p0, _mm256_mul_ps(horizontal_sums8(acc), scale_v));
        }
    }
    // Softmax weights (unnormalised: the normaliser scales the output) and the output, per head.
    for (long h = 0; h < h_count; ++h) {
        float* x = scores.data() + h * padded;
        __m256 mv = _mm256_loadu_ps(x);  // the padding lanes repeat a real score: they cannot raise the max
        for (long p = 8; p < padded; p += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + p));
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, mv);
        const __m256 max_v = _mm256_set1_ps(*std::max_element(lanes, lanes + 8));
        __m256 total_v = _mm256_setzero_ps();
        for (long p = 0; p < padded; p += 8) {
            __m256 e = exp_clamped(_mm256_sub_ps(_mm256_loadu_ps(x + p), max_v));
            if (p + 8 > length) {  // the last group: padding lanes weigh nothing
                const __m256i lane = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(p)),
                                                      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                e = _mm256_and_ps(e, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(length)), lane)));
            }
            _mm256_storeu_ps(x + p, e);
            total_v = _mm256_add_ps(total_v, e);
        }
        const long voff = (kv_first + h / s.group) * d;
        weighted_rows_any(chunks, x, v_cache, slots, row, voff, length, 1.0f / horizontal_sum(total_v),
                          out + (h_first + h) * d);
    }
}

// The shared body of the entry points: `attend_one(task's sequence, first KV head, KV heads, scores)`.
template <typename Attend>
inline void run_tasks(long batch, long kv_heads, long head_dim, long elem_bytes, const long* begin, const long* end,
               Attend attend_one) {
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
    const bool parallel =
        tasks > 1 && threads > 1 && 2 * visible * kv_heads * head_dim * elem_bytes >= kMinParallelBytes;
#pragma omp parallel if (parallel)
    {
        std::vector<float> scores;
#pragma omp for schedule(dynamic, 1)
        for (long t = 0; t < tasks; ++t) attend_one(t / split, (t % split) * per_task, per_task, scores);
    }
}

template <typename T>
inline int paged_decode_half(const float* q, long q_stride, long batch, long heads, long kv_heads, long head_dim,
                      const T* k_cache, const T* v_cache, const long* slots, long slots_stride, const long* begin,
                      const long* end, float scale, float* out) {
    if (kv_heads < 1 || heads % kv_heads != 0) return 1;
    if (head_dim % 8 != 0) return 2;  // 2-byte pools: the vector path only
    const Shape shape{heads, kv_heads, head_dim, heads / kv_heads};
    run_tasks(batch, kv_heads, head_dim, 2, begin, end, [&](long b, long first, long count, std::vector<float>& sc) {
        attend_vec<T>(shape, q + b * q_stride, out + b * heads * head_dim, first, count, k_cache, v_cache,
                      slots + b * slots_stride + begin[b], end[b] - begin[b], scale, sc);
    });
    return 0;
}

// ---- a step's new K/V rows into the pool ---------------------------------------------------------
//
// One call per layer where torch ran two index_copy_ (and, for a 2-byte pool, two conversions
// first): about 70 us each at decode sizes, nearly all dispatch, 60 of them per step of a 30-layer
// model. Rounding to a 2-byte pool is torch's: round to nearest even (bfloat16 by the bit trick
// c10 uses, float16 by F16C), so the pool holds the same bits as after k.to(dtype).

inline void store_row(float* dst, const float* src, long n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }
inline void store_row(bf16_t* dst, const float* src, long n) {
    for (long i = 0; i < n; ++i) {
        unsigned int u;
        std::memcpy(&u, src + i, 4);
        dst[i].bits = std::isnan(src[i]) ? static_cast<unsigned short>(0x7FC0)
                                         : static_cast<unsigned short>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    }
}
inline void store_row(f16_t* dst, const float* src, long n) {
    for (long i = 0; i < n; ++i) dst[i].bits = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

// Returns 0, or 1 (nothing written) when a slot is outside [0, num_slots).
template <typename T>
inline int write_kv(const float* k, const float* v, long token_stride, long tokens, long width, const long* slots,
             long num_slots, T* k_cache, T* v_cache) {
    for (long t = 0; t < tokens; ++t)
        if (slots[t] < 0 || slots[t] >= num_slots) return 1;
    for (long t = 0; t < tokens; ++t) {
        store_row(k_cache + slots[t] * width, k + t * token_stride, width);
        store_row(v_cache + slots[t] * width, v + t * token_stride, width);
    }
    return 0;
}

// One decode row per sequence attends over a pool stored as `kind` (0 float32, 1 bfloat16, 2
// float16): the entry points' dispatch. Returns 0; 1 when heads is not a multiple of kv_heads; 2
// for a 2-byte pool whose head_dim is not a multiple of 8.
inline int paged_decode_any(long kind, const float* q, long q_stride, long batch, long heads, long kv_heads,
                            long head_dim, const void* k_cache, const void* v_cache, const long* slots,
                            long slots_stride, const long* begin, const long* end, float scale, float* out) {
    if (kind == 1)
        return paged_decode_half(q, q_stride, batch, heads, kv_heads, head_dim, static_cast<const bf16_t*>(k_cache),
                                 static_cast<const bf16_t*>(v_cache), slots, slots_stride, begin, end, scale, out);
    if (kind == 2)
        return paged_decode_half(q, q_stride, batch, heads, kv_heads, head_dim, static_cast<const f16_t*>(k_cache),
                                 static_cast<const f16_t*>(v_cache), slots, slots_stride, begin, end, scale, out);
    if (kv_heads < 1 || heads % kv_heads != 0) return 1;
    const Shape shape{heads, kv_heads, head_dim, heads / kv_heads};
    const bool vector_path = head_dim % 8 == 0;
    const float* k = static_cast<const float*>(k_cache);
    const float* v = static_cast<const float*>(v_cache);
    run_tasks(batch, kv_heads, head_dim, 4, begin, end, [&](long b, long first, long count, std::vector<float>& sc) {
        (vector_path ? attend_vec<float> : attend)(shape, q + b * q_stride, out + b * heads * head_dim, first, count,
                                                  k, v, slots + b * slots_stride + begin[b], end[b] - begin[b], scale,
                                                  sc);
    });
    return 0;
}

// write_kv into a pool stored as `kind` (as above); 1 (nothing written) for a slot outside it.
inline int write_kv_any(long kind, const float* k, const float* v, long token_stride, long tokens, long width,
                        const long* slots, long num_slots, void* k_cache, void* v_cache) {
    if (kind == 1)
        return write_kv(k, v, token_stride, tokens, width, slots, num_slots, static_cast<bf16_t*>(k_cache),
                        static_cast<bf16_t*>(v_cache));
    if (kind == 2)
        return write_kv(k, v, token_stride, tokens, width, slots, num_slots, static_cast<f16_t*>(k_cache),
                        static_cast<f16_t*>(v_cache));
    return write_kv(k, v, token_stride, tokens, width, slots, num_slots, static_cast<float*>(k_cache),
                    static_cast<float*>(v_cache));
}

}  // namespace kvfence_attention
