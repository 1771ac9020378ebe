// fp32 products y = x W^T + bias for decode-sized batches, over a panel-major copy of W.
//
// Why a second layout: the register tile of broadcast_gemm.h reads W in its [out, in] layout as 6 or
// 12 interleaved row streams (one broadcast per weight), which the hardware prefetcher follows
// poorly when a few batch rows leave it little arithmetic per weight. Here W is copied once into
// panels of kPackWidth output rows laid out [in][kPackWidth] (the last panel zero-padded), so a
// panel is one contiguous stream read front to back, and the tile loads two vectors of weights per
// input element and broadcasts one x value per batch row (up to 6 batch rows x 16 outputs: 12 FMAs
// for 2 vector loads and 6 broadcasts), x read in place (no transposed copy). Measured on one core
// over a 30-layer decode step's products (538 MB streamed, the next panel prefetched during the
// first tile of each panel; 2026-11-30, busy machine, three runs, best of 6 each), CPU ms:
//   rows          1        2        3        4        8        16        24
//   dot form      47-55    65-68    80-85    89-97
//   broadcast     61-65    61-68    59-67    63-67    62-71    65-73     108-116
//   packed        48-53    49-54    47-49    48-51    69-74    101-114   116-121
// so the panels serve 3-7 rows (kMinRows .. kMaxRows), where they save 20-27 %; from 8 rows the
// broadcast tile reuses each weight over 16 batch rows and the panels' re-reads from L2 cost more.
//
// Each output is one sequential float32 sum over `in` in its own lane, FMA by FMA, as in
// broadcast_gemm.h: the results are bit for bit those of the broadcast tile (same products, same
// order), so switching layouts changes no token.
//
// Header-only; included by decode_f32.cpp, whose OpenMP region shares the panels.

#pragma once

#include <immintrin.h>

#include <algorithm>

#ifndef KV_UNROLL
#define KV_UNROLL _Pragma("GCC unroll 16")
#endif

namespace kvfence_packed {

constexpr long kPackWidth = 16;  // output rows per panel: two AVX vectors
constexpr long kTileRows = 6;    // batch rows per register tile: 12 accumulators + 2 weights + 1 x
// Batch sizes that use the panels (decode_f32.cpp's linear_f32): from 8 rows the broadcast tile,
// whose 6 x 16 tile reuses each weight it loads over 16 batch rows, was as fast or faster. From 3,
// the broadcast tile's first size (ops.py's TILED_MIN_ROWS), so choosing the panels never changes a
// bit: at 2 rows they would beat the dot-product form too, but in another summation order.
constexpr long kMinRows = 3;
constexpr long kMaxRows = 7;

// y[m, o0 + j] for MR batch rows and the `width` (<= 16) valid outputs of one panel p [in][16];
// meanwhile prefetches `ahead_lines` cache lines from `ahead`, spread over the loop over `in`.
template <int MR>
inline void tile(const float* x, long ldx, const float* p, long in, const float* bias, float* y, long ldy,
                 long width, const float* ahead, long ahead_lines) {
    __m256 acc[MR][2];
    KV_UNROLL for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const char* next_line = reinterpret_cast<const char*>(ahead);
    long lines_done = 0;
    for (long k = 0; k < in; ++k) {
        for (; lines_done * in < (k + 1) * ahead_lines; ++lines_done) _mm_prefetch(next_line + 64 * lines_done, _MM_HINT_T0);
        const __m256 w0 = _mm256_loadu_ps(p + kPackWidth * k);
        const __m256 w1 = _mm256_loadu_ps(p + kPackWidth * k + 8);
        KV_UNROLL for (int r = 0; r < MR; ++r) {
            const __m256 xb = _mm256_broadcast_ss(x + r * ldx + k);
            acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
        }
    }
    alignas(32) float lanes[kPackWidth];
    KV_UNROLL for (int r = 0; r < MR; ++r) {
        _mm256_store_ps(lanes, acc[r][0]);
        _mm256_store_ps(lanes + 8, acc[r][1]);
        float* yr = y + r * ldy;
        if (bias != nullptr) {
            for (long j = 0; j < width; ++j) yr[j] = lanes[j] + bias[j];
        } else {
            for (long j = 0; j < width; ++j) yr[j] = lanes[j];
        }
    }
}

template <int MR>
inline void tile_rows(const float* x, long ldx, const float* p, long in, const float* bias, float* y, long ldy,
                      long width, const float* ahead, long ahead_lines, long rows) {
    switch (rows) {  // MR is the full tile; fewer rows only at the batch's end
        case 1: tile<1>(x, ldx, p, in, bias, y, ldy, width, ahead, ahead_lines); break;
        case 2: tile<2>(x, ldx, p, in, bias, y, ldy, width, ahead, ahead_lines); break;
        case 3: tile<3>(x, ldx, p, in, bias, y, ldy, width, ahead, ahead_lines); break;
        case 4: tile<4>(x, ldx, p, in, bias, y, ldy, width, ahead, ahead_lines); break;
        case 5: tile<5>(x, ldx, p, in, bias, y, ldy, width, ahead, ahead_lines); break;
        default: tile<MR>(x, ldx, p, in, bias, y, ldy, width, ahead, ahead_lines); break;
    }
}

// Output rows [row_begin, row_end) of y (row_begin a multiple of kPackWidth) for every batch row,
// from the packed panels. The last panel prefetches the packed rows [then_begin, then_end) (the
// caller's next range; none when empty), each earlier one the panel after it.
inline void rows_packed(const float* x, long batch, long ldx, const float* packed, long in, const float* bias,
                        float* y, long ldy, long row_begin, long row_end, long then_begin = 0, long then_end = 0) {
    const long panel_floats = kPackWidth * in;
    for (long o = row_begin; o < row_end; o += kPackWidth) {
        const long width = std::min(kPackWidth, row_end - o);
        const float* panel = packed + o * in;
        const bool last = o + kPackWidth >= row_end;
        const float* ahead = last ? packed + then_begin * in : panel + panel_floats;
        const long ahead_lines = last ? (then_end > then_begin ? panel_floats / 16 : 0) : panel_floats / 16;
        const float* bo = bias != nullptr ? bias + o : nullptr;
        for (long m = 0; m < batch; m += kTileRows) {
            tile_rows<kTileRows>(x + m * ldx, ldx, panel, in, bo, y + m * ldy + o, ldy, width, ahead,
                                 m == 0 ? ahead_lines : 0, std::min(kTileRows, batch - m));
        }
    }
}

}  // namespace kvfence_packed
