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
