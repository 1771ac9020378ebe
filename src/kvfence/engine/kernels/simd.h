// AVX2 helpers shared by the kernels; build.py hashes this header with each kernel's source.
#pragma once

#include <immintrin.h>

// Sum of the eight lanes of v.
static inline float horizontal_sum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_hadd_ps(lo, lo);
    lo = _mm_hadd_ps(lo, lo);
    return _mm_cvtss_f32(lo);
}

// out[i] = sum of the eight lanes of a[i], for eight vectors at once (a transpose by pairwise adds).
static inline __m256 horizontal_sums8(const __m256* a) {
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]);
    const __m256 t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]);
    const __m256 t3 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1);  // [a0..a3 low halves | a0..a3 high halves]
    const __m256 u1 = _mm256_hadd_ps(t2, t3);  // the same for a4..a7
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// e^x within about 2 ulp of expf for x in [-87, 88], x clamped to that range: x = n ln2 + r with
// |r| <= ln2 / 2, e^r by its Taylor series to r^7 (truncation below 6e-9), times 2^n through the
// exponent bits (2^n stays a normal float there). Below -87 it returns e^-87, about 1.6e-38: next to
// the largest term of a softmax, which is 1, that is zero; in silu it leaves x / (1 + e^-x) exact.
static inline __m256 exp_clamped(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);  // ln2 split in two parts so
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.4286068203094172e-06f), r);    // n * ln2_hi is exact
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// ---- weight storage types: the products read weights as W::T and widen each to float32 on load,
// so every sum is accumulated in float32 whatever the weights are stored in ---------------------

#include <cstdint>
#include <cstring>

// float32 weights (the reference).
struct WeightF32 {
    using T = float;
    static constexpr long kind = 0;
    static inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
    static inline float at(const float* p, long i) { return p[i]; }
};

// bfloat16 weights: the upper half of a float32, so widening is a 16-bit shift (exact).
struct WeightBF16 {
    using T = std::uint16_t;
    static constexpr long kind = 1;
    static inline __m256 load8(const std::uint16_t* p) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    static inline float at(const std::uint16_t* p, long i) {
        const std::uint32_t bits = static_cast<std::uint32_t>(p[i]) << 16;
        float f;
        std::memcpy(&f, &bits, sizeof f);
        return f;
    }
};

// IEEE float16 weights, widened by F16C's vcvtph2ps (exact).
struct WeightF16 {
    using T = std::uint16_t;
    static constexpr long kind = 2;
    static inline __m256 load8(const std::uint16_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static inline float at(const std::uint16_t* p, long i) { return _cvtsh_ss(p[i]); }
};

// dst[i] = float(src[i]) for i < n.
template <class W>
inline void widen(const typename W::T* src, long n, float* dst) {
    long i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, W::load8(src + i));
    for (; i < n; ++i) dst[i] = W::at(src, i);
}
