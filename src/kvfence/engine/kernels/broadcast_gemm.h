// fp32 products y = x W^T + bias for a batch of more than a few rows (decode batches, sampled rows
// through the LM head), with W in the checkpoint's own [out, in] row-major layout.
//
// Why not the dot-product form of decode_f32.cpp: each output there ends in a horizontal sum and
// every step loads as many vectors as it multiplies, so past a few batch rows it is bound by loads
// and reaches ~20 GFLOP/s per core, and MKL's sgemm on AMD EPYC is no better below ~128 rows
// (14 GFLOP/s at 16 rows, 19 at 24, 30 at 64; 60 at 2048). Here the batch is transposed once per
// call into blocks of x^T [in][<= 64 rows], and a register tile of weight rows x batch rows keeps
// 12 accumulators: per input element it broadcasts one weight per weight row and loads one vector
// of 8 batch rows, 12 FMAs for 8 loads (6 weight rows x 16 batch rows) or 13 (12 x 8). Measured on
// one core: 46-60 GFLOP/s from 16 to 128 rows. Each output is one sequential sum over `in` in its
// own lane (no horizontal sum), so its rounding is that of a plain left-to-right float32 sum.
//
// Weights stream from memory (a 30-layer model's are far larger than L3), and a tile reads its 6 or
// 12 weight rows as as many interleaved streams, which the hardware prefetcher follows poorly: from
// 16 rows on, the products ran at 3-5 GB/s, neither compute- nor bandwidth-bound. So the first tile
// of each panel also prefetches the next panel's rows (one contiguous range), spread evenly over
// its loop: measured on one core over a decode step's products (538 MB), 8-20 % less CPU time at
// 8-24 rows than without; prefetching a few hundred bytes ahead within each row was slower.
//
// AVX-512 (runtime dispatch, `isa()` below): on a CPU with AVX-512F the batch columns go 16 or 32
// at a time through a 12 x 32 tile of zmm accumulators (24 FMAs for 2 loads and 12 broadcasts),
// twice the lanes per FMA of the AVX2 tile; a remaining 8 columns, and every column on a CPU
// without AVX-512, run the AVX2 tile. Each output is still one sequential float32 sum over `in` in
// its own lane with the same FMAs in the same order, so both forms give the same bits (tested), and
// the library builds with -mavx2 only: the AVX-512 code is compiled for its own target attribute.
//
// Header-only; included by decode_f32.cpp, whose OpenMP region shares the weight rows.

#pragma once

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "simd.h"

#ifndef KV_UNROLL
#define KV_UNROLL _Pragma("GCC unroll 16")
#endif

namespace kvfence_gemm {

// Which tile the products use: 0 AVX2, 1 AVX-512 (AVX-512F). Chosen once from the CPU's features;
// set_isa lowers it (tests, KVFENCE_CPU_ISA=avx2) and never raises it above what the CPU has.
inline int cpu_isa() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 1 : 0;
}
inline int& isa_level() {
    static int level = cpu_isa();
    return level;
}
inline int isa() { return isa_level(); }
inline int set_isa(int wanted) {
    const int have = cpu_isa();
    isa_level() = std::max(0, std::min(wanted, have));
    return isa_level();
}

// One weight broadcast to eight lanes (float32 weights: one vbroadcastss from memory).
template <class W>
inline __m256 broadcast_weight(const typename W::T* p) {
    if constexpr (W::kind == 0) {
        return _mm256_broadcast_ss(p);
    } else {
        return _mm256_set1_ps(W::at(p, 0));
    }
}

constexpr long kBlockCols = 64;  // batch rows per packed block of x^T: [in][64] floats stay in L2
constexpr long kPanelRows = 12;  // weight rows per register tile

inline long round8(long n) { return (n + 7) / 8 * 8; }

// Floats of the packed x^T for `batch` rows of `in` inputs (blocks padded to whole vectors).
inline long packed_floats(long batch, long in) {
    const long full = batch / kBlockCols;
    const long rest = batch - full * kBlockCols;
    return (full * kBlockCols + round8(rest)) * in;
}

// xt block j = rows [64 j, 64 j + width) of x as [in][round8(width)], zero-padded columns.
inline void pack_transposed(const float* x, long batch, long ldx, long in, float* xt) {
    for (long m0 = 0; m0 < batch; m0 += kBlockCols) {
        const long width = std::min(kBlockCols, batch - m0);
        const long ld = round8(width);
        float* dst = xt + m0 * in;
        for (long k = 0; k < in; ++k) {
            float* row = dst + k * ld;
            for (long m = 0; m < width; ++m) row[m] = x[(m0 + m) * ldx + k];
            for (long m = width; m < ld; ++m) row[m] = 0.0f;
        }
    }
}

// y[m, r] (+ bias[r]) for NR weight rows and MV * 8 batch columns of one packed block; meanwhile
// prefetches `ahead_lines` cache lines from `ahead` (null: none), spread over the loop over `in`.
template <int NR, int MV, class W = WeightF32>
inline void tile(const float* xt, long ld, const typename W::T* w, long in, const float* bias, float* y, long ldy,
                 long cols, const float* ahead = nullptr, long ahead_lines = 0) {
    __m256 acc[NR][MV];
    KV_UNROLL for (int r = 0; r < NR; ++r)
        KV_UNROLL for (int v = 0; v < MV; ++v) acc[r][v] = _mm256_setzero_ps();
    const char* next_line = reinterpret_cast<const char*>(ahead);
    long lines_done = 0;
    for (long k = 0; k < in; ++k) {
        for (; lines_done * in < (k + 1) * ahead_lines; ++lines_done) _mm_prefetch(next_line + 64 * lines_done, _MM_HINT_T0);
        __m256 xv[MV];
        KV_UNROLL for (int v = 0; v < MV; ++v) xv[v] = _mm256_loadu_ps(xt + k * ld + 8 * v);
        KV_UNROLL for (int r = 0; r < NR; ++r) {
            const __m256 wb = broadcast_weight<W>(w + r * in + k);
            KV_UNROLL for (int v = 0; v < MV; ++v) acc[r][v] = _mm256_fmadd_ps(wb, xv[v], acc[r][v]);
        }
    }
    alignas(32) float lanes[MV * 8];
    KV_UNROLL for (int r = 0; r < NR; ++r) {
        KV_UNROLL for (int v = 0; v < MV; ++v) _mm256_store_ps(lanes + 8 * v, acc[r][v]);
        const float b = bias != nullptr ? bias[r] : 0.0f;
        for (long m = 0; m < cols; ++m) y[m * ldy + r] = bias != nullptr ? lanes[m] + b : lanes[m];
    }
}

// tile<NR, MV> on zmm vectors (16 batch columns each) for float32 weights: the same sums, lane by
// lane, as the AVX2 tile over the same columns. Out of line: it is compiled for AVX-512F alone.
template <int NR, int MV>
__attribute__((target("avx512f"), noinline)) void tile512(const float* xt, long ld, const float* w, long in,
                                                          const float* bias, float* y, long ldy, long cols,
                                                          const float* ahead, long ahead_lines) {
    __m512 acc[NR][MV];
    KV_UNROLL for (int r = 0; r < NR; ++r)
        KV_UNROLL for (int v = 0; v < MV; ++v) acc[r][v] = _mm512_setzero_ps();
    const char* next_line = reinterpret_cast<const char*>(ahead);
    long lines_done = 0;
    for (long k = 0; k < in; ++k) {
        // into L2: this tile's own panel fills L1 (into L1, 16-32 rows took 5-10 % longer, one run each)
        for (; lines_done * in < (k + 1) * ahead_lines; ++lines_done) _mm_prefetch(next_line + 64 * lines_done, _MM_HINT_T1);
        __m512 xv[MV];
        KV_UNROLL for (int v = 0; v < MV; ++v) xv[v] = _mm512_loadu_ps(xt + k * ld + 16 * v);
        KV_UNROLL for (int r = 0; r < NR; ++r) {
            const __m512 wb = _mm512_set1_ps(w[r * in + k]);
            KV_UNROLL for (int v = 0; v < MV; ++v) acc[r][v] = _mm512_fmadd_ps(wb, xv[v], acc[r][v]);
        }
    }
    alignas(64) float lanes[MV * 16];
    KV_UNROLL for (int r = 0; r < NR; ++r) {
        KV_UNROLL for (int v = 0; v < MV; ++v) _mm512_store_ps(lanes + 16 * v, acc[r][v]);
        const float b = bias != nullptr ? bias[r] : 0.0f;
        for (long m = 0; m < cols; ++m) y[m * ldy + r] = bias != nullptr ? lanes[m] + b : lanes[m];
    }
}

template <class W>
inline void rows_broadcast(const float* xt, long batch, long in, const typename W::T* w, const float* bias, float* y,
                           long ldy, long row_begin, long row_end, long then_begin = 0, long then_end = 0);

// rows_broadcast over half-precision weights: each group of kWidenRows rows is widened once into a
// float32 scratch (L2-sized) and the float32 tile runs over it, so a weight is widened once, not once
// per 16 batch rows with a scalar conversion per broadcast (which made B=32 slower than float32's).
// The sums are the same FMAs in the same order: bit for bit the float32 tile's on the same values.
constexpr long kWidenRows = 4 * kPanelRows;

template <class W>
inline void rows_broadcast_widened(const float* xt, long batch, long in, const typename W::T* w, const float* bias,
                                   float* y, long ldy, long row_begin, long row_end) {
    static thread_local std::vector<float> wide;
    if (wide.size() < static_cast<size_t>(kWidenRows * in)) wide.resize(static_cast<size_t>(kWidenRows * in));
    for (long o = row_begin; o < row_end; o += kWidenRows) {
        const long n = std::min(kWidenRows, row_end - o);
        widen<W>(w + o * in, n * in, wide.data());
        rows_broadcast<WeightF32>(xt, batch, in, wide.data(), bias != nullptr ? bias + o : nullptr, y + o, ldy, 0, n);
    }
}

// Weight rows [row_begin, row_end) of y for every batch row, from the packed x^T. The last panel
// prefetches weight rows [then_begin, then_end) (the caller's next range; none when empty).
template <class W>
inline void rows_broadcast(const float* xt, long batch, long in, const typename W::T* w, const float* bias, float* y,
                           long ldy, long row_begin, long row_end, long then_begin, long then_end) {
    if constexpr (W::kind != 0) {
        rows_broadcast_widened<W>(xt, batch, in, w, bias, y, ldy, row_begin, row_end);
        return;
    }
    // Panels outer, blocks of 64 batch columns inner: each panel is read from memory once however
    // many blocks there are (blocks outer streamed every weight again per 64 rows), and the blocks
    // of x^T stay in L2. The sums do not depend on the order (one lane per output).
    long o = row_begin;
    for (; o + kPanelRows <= row_end; o += kPanelRows) {
        const typename W::T* wo = w + o * in;
        const float* bo = bias != nullptr ? bias + o : nullptr;
        // The first tile over this panel fetches the next one's rows (each later pass over the
        // same panel finds it in L1/L2).
        const bool last = o + 2 * kPanelRows > row_end;
        const long ahead_rows = std::min(kPanelRows, last ? then_end - then_begin : row_end - o - kPanelRows);
        const long ahead_bytes = ahead_rows * in * static_cast<long>(sizeof(typename W::T));
        const auto* ahead = reinterpret_cast<const float*>(last ? w + then_begin * in : wo + kPanelRows * in);
        for (long m0 = 0; m0 < batch; m0 += kBlockCols) {
            const long width = std::min(kBlockCols, batch - m0);
            const long ld = round8(width);
            const float* xb = xt + m0 * in;
            float* yb = y + m0 * ldy;
            const bool first = m0 == 0;
            long m = 0;
            if constexpr (W::kind == 0) {
                if (isa() >= 1) {  // AVX-512: 32 then 16 columns a tile
                    for (; m + 32 <= ld; m += 32) {
                        tile512<kPanelRows, 2>(xb + m, ld, wo, in, bo, yb + m * ldy + o, ldy, std::min(32L, width - m),
                                               ahead, first && m == 0 ? (ahead_bytes + 63) / 64 : 0);
                    }
                    for (; m + 16 <= ld; m += 16) {
                        tile512<kPanelRows, 1>(xb + m, ld, wo, in, bo, yb + m * ldy + o, ldy, std::min(16L, width - m),
                                               ahead, first && m == 0 ? (ahead_bytes + 63) / 64 : 0);
                    }
                }
            }
            for (; m + 16 <= ld; m += 16) {
                const long cols = std::min(16L, width - m);
                const long half_lines = first && m == 0 ? ahead_bytes / 128 : 0;  // half of the next panel each
                tile<6, 2, W>(xb + m, ld, wo, in, bo, yb + m * ldy + o, ldy, cols, ahead, half_lines);
                tile<6, 2, W>(xb + m, ld, wo + 6 * in, in, bo != nullptr ? bo + 6 : nullptr, yb + m * ldy + o + 6, ldy,
                              cols, ahead + 16 * half_lines, first && m == 0 ? (ahead_bytes + 63) / 64 - half_lines : 0);
            }
            for (; m < ld; m += 8) {
                const long lines = first && m == 0 ? (ahead_bytes + 63) / 64 : 0;
                tile<12, 1, W>(xb + m, ld, wo, in, bo, yb + m * ldy + o, ldy, std::min(8L, width - m), ahead, lines);
            }
        }
    }
    for (; o < row_end; ++o) {  // fewer than a panel of rows left
        for (long m0 = 0; m0 < batch; m0 += kBlockCols) {
            const long width = std::min(kBlockCols, batch - m0);
            const long ld = round8(width);
            for (long m = 0; m < ld; m += 8)
                tile<1, 1, W>(xt + m0 * in + m, ld, w + o * in, in, bias != nullptr ? bias + o : nullptr,
                              y + m0 * ldy + m * ldy + o, ldy, std::min(8L, width - m));
        }
    }
}

}  // namespace kvfence_gemm
