// fp32 kernels for the decode step on x86-64 CPUs with AVX2 and FMA.
//
// kvfence_linear_f32: y[b, o] = sum_i x[b, i] * w[o, i] + bias[o] for a few rows b. Batch-1 (and
// small-batch) decode reads every weight once per token, so it is bound by memory bandwidth.
// torch's fp32 F.linear on one row streams weights at a third of the bandwidth on some CPUs (MKL
// on AMD EPYC); this kernel streams each weight row once for the whole batch, in the checkpoint's
// natural [out, in] row-major layout, and shares the rows with torch's OpenMP threads.
//
// kvfence_rms_norm_f32, kvfence_silu_mul_f32, kvfence_rope_f32: a step's elementwise work in one
// call each, where torch runs 3 to 12 ops. At decode sizes that saves dispatch (a few microseconds
// per op); at prefill sizes it saves passes over memory: torch's op-by-op forms took 10-15x these
// kernels' CPU time at 2,048 tokens (one thread, 2026-11-30). They run on the calling thread below
// kMinParallelFloats (waking other threads costs more than it saves), else over `threads` OpenMP
// threads in contiguous row ranges: each row is computed the same way whatever the thread count.
// Compiled with -ffp-contract=off so a*b - c*d rounds as torch's separate ops do.
//
// Built at first use by kvfence/engine/kernels/build.py; called through ctypes. No torch headers,
// so it compiles in about a second.

#include <immintrin.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "broadcast_gemm.h"
#include "packed_gemm.h"
#include "paged_attention.h"
#include "simd.h"

namespace {

// GCC keeps a small array of __m256 accumulators in registers only when every loop over it is
// unrolled; otherwise it stores each accumulator to the stack on every iteration (measured: half
// the speed of the products).
#define KV_UNROLL _Pragma("GCC unroll 16")

constexpr long kBatchChunk = 4;  // batch rows that share one pass over a block of weight rows

// R weight rows x B batch rows: R*B accumulators stay in registers; each weight vector is loaded
// once and used B times.
template <class W, int R, int B>
inline void block(const typename W::T* w, long in, const float* x, long ldx, float* y, long ldy, const float* bias) {
    __m256 acc[R][B];
    KV_UNROLL for (int r = 0; r < R; ++r)
        KV_UNROLL for (int b = 0; b < B; ++b) acc[r][b] = _mm256_setzero_ps();
    long i = 0;
    for (; i + 8 <= in; i += 8) {
        __m256 xv[B];
        KV_UNROLL for (int b = 0; b < B; ++b) xv[b] = _mm256_loadu_ps(x + b * ldx + i);
        KV_UNROLL for (int r = 0; r < R; ++r) {
            const __m256 wv = W::load8(w + r * in + i);
            KV_UNROLL for (int b = 0; b < B; ++b) acc[r][b] = _mm256_fmadd_ps(wv, xv[b], acc[r][b]);
        }
    }
    KV_UNROLL for (int r = 0; r < R; ++r) {
        KV_UNROLL for (int b = 0; b < B; ++b) {
            float s = horizontal_sum(acc[r][b]);
            for (long j = i; j < in; ++j) s += W::at(w, r * in + j) * x[b * ldx + j];
            y[b * ldy + r] = bias != nullptr ? s + bias[r] : s;
        }
    }
}

template <class W, int R>
inline void rows_block(const typename W::T* w, long in, const float* x, long ldx, long batch, float* y, long ldy,
                       const float* bias) {
    // The block's weight rows (R * in floats) stay in L1 across the batch chunks, so memory reads
    // each weight once however large the batch.
    long b = 0;
    for (; b + kBatchChunk <= batch; b += kBatchChunk) block<W, R, 4>(w, in, x + b * ldx, ldx, y + b * ldy, ldy, bias);
    switch (batch - b) {
        case 3: block<W, R, 3>(w, in, x + b * ldx, ldx, y + b * ldy, ldy, bias); break;
        case 2: block<W, R, 2>(w, in, x + b * ldx, ldx, y + b * ldy, ldy, bias); break;
        case 1: block<W, R, 1>(w, in, x + b * ldx, ldx, y + b * ldy, ldy, bias); break;
        default: break;
    }
}

template <class W, int R>
void rows_by(const float* x, long ldx, long batch, const typename W::T* w, long in, const float* bias, float* y, long ldy,
             long row_begin, long row_end) {
    long o = row_begin;
    for (; o + R <= row_end; o += R)
        rows_block<W, R>(w + o * in, in, x, ldx, batch, y + o, ldy, bias != nullptr ? bias + o : nullptr);
    for (; o < row_end; ++o)
        rows_block<W, 1>(w + o * in, in, x, ldx, batch, y + o, ldy, bias != nullptr ? bias + o : nullptr);
}

// One batch row: one weight row at a time, read as a single sequential stream (which the hardware
// prefetcher follows best: measured 10-25 % faster than 4 interleaved rows), with 4 independent
// accumulators so the FMA latency does not bound it. The rows of a range are one contiguous run of
// memory, and each step may also prefetch the two cache lines `ahead` bytes further on (into the next
// rows at a row's end; prefetches never fault: those past the weights are harmless). Whether that
// helps depends on the CPU, so the distance is chosen by timing (PrefetchTuner below).
template <class T>
inline void prefetch_two_lines(const T* p, long ahead) {
    const char* line = reinterpret_cast<const char*>(p) + ahead;
    _mm_prefetch(line, _MM_HINT_T0);
    _mm_prefetch(line + 64, _MM_HINT_T0);
}

template <class W, bool Prefetch>
void rows_single(const float* x, const typename W::T* w, long in, const float* bias, float* y, long row_begin,
                 long row_end, long ahead) {
    for (long o = row_begin; o < row_end; ++o) {
        const typename W::T* wr = w + o * in;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        long i = 0;
        if constexpr (W::kind != 0) {
            // half weights: 64 per iteration (two cache lines, as float32's 32), eight accumulators
            __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
            for (; i + 64 <= in; i += 64) {
                if constexpr (Prefetch) prefetch_two_lines(wr + i, ahead);
                a0 = _mm256_fmadd_ps(W::load8(wr + i), _mm256_loadu_ps(x + i), a0);
                a1 = _mm256_fmadd_ps(W::load8(wr + i + 8), _mm256_loadu_ps(x + i + 8), a1);
                a2 = _mm256_fmadd_ps(W::load8(wr + i + 16), _mm256_loadu_ps(x + i + 16), a2);
                a3 = _mm256_fmadd_ps(W::load8(wr + i + 24), _mm256_loadu_ps(x + i + 24), a3);
                b0 = _mm256_fmadd_ps(W::load8(wr + i + 32), _mm256_loadu_ps(x + i + 32), b0);
                b1 = _mm256_fmadd_ps(W::load8(wr + i + 40), _mm256_loadu_ps(x + i + 40), b1);
                b2 = _mm256_fmadd_ps(W::load8(wr + i + 48), _mm256_loadu_ps(x + i + 48), b2);
                b3 = _mm256_fmadd_ps(W::load8(wr + i + 56), _mm256_loadu_ps(x + i + 56), b3);
            }
            a0 = _mm256_add_ps(a0, b0);
            a1 = _mm256_add_ps(a1, b1);
            a2 = _mm256_add_ps(a2, b2);
            a3 = _mm256_add_ps(a3, b3);
        }
        for (; i + 32 <= in; i += 32) {
            if constexpr (W::kind == 0 && Prefetch) prefetch_two_lines(wr + i, ahead);  // 32 floats: two lines
            a0 = _mm256_fmadd_ps(W::load8(wr + i), _mm256_loadu_ps(x + i), a0);
            a1 = _mm256_fmadd_ps(W::load8(wr + i + 8), _mm256_loadu_ps(x + i + 8), a1);
            a2 = _mm256_fmadd_ps(W::load8(wr + i + 16), _mm256_loadu_ps(x + i + 16), a2);
            a3 = _mm256_fmadd_ps(W::load8(wr + i + 24), _mm256_loadu_ps(x + i + 24), a3);
        }
        for (; i + 8 <= in; i += 8) a0 = _mm256_fmadd_ps(W::load8(wr + i), _mm256_loadu_ps(x + i), a0);
        float s = horizontal_sum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for (; i < in; ++i) s += W::at(wr, i) * x[i];
        y[o] = bias != nullptr ? s + bias[o] : s;
    }
}

// Rows [row_begin, row_end) of y for every batch row (`ahead`: batch-1's prefetch distance, 0 none).
// Blocks of 4 weight rows for two batch rows, of 2 beyond: R * min(batch, 4) accumulators plus the
// inputs must fit the 16 AVX registers.
template <class W>
void rows(const float* x, long ldx, long batch, const typename W::T* w, long in, const float* bias, float* y, long ldy,
          long row_begin, long row_end, long ahead) {
    if (batch == 1) {
        if (ahead > 0) {
            rows_single<W, true>(x, w, in, bias, y, row_begin, row_end, ahead);
        } else {
            rows_single<W, false>(x, w, in, bias, y, row_begin, row_end, 0);
        }
    } else if (batch == 2) {
        rows_by<W, 4>(x, ldx, batch, w, in, bias, y, ldy, row_begin, row_end);
    } else {
        rows_by<W, 2>(x, ldx, batch, w, in, bias, y, ldy, row_begin, row_end);
    }
}

// ---- sharing a product over threads -------------------------------------------------------------
//
// Threads are OpenMP's, i.e. torch's own (GCC's libgomp, which the loader shares with torch): on a
// small machine torch's worker threads are awake throughout a decode step (attention runs on them),
// and a separate pool would fight them for the same cores. Chunks of rows are claimed from a shared
// counter, so a slower thread takes fewer. An OpenMP region ends at a barrier, though: on a machine
// busier than its cores every product then waits for a descheduled thread (measured: 3x slower
// than one thread). So the caller times its wait at the barrier and the products' pace (wall time
// per weight, over windows of products of one batch size), and runs the next products alone when
// waiting took over a fifth of a window's time, or when the window ran slower than the last window
// of products run alone at that batch size (on an oversubscribed machine the worker's spinning also
// takes the caller's core, which no wait shows). Alone first for about a token's worth of products,
// four times as long after each further such window in a row (to some tens of tokens), back to the
// shortest after a good window. One late wake-up (a daemon, another process's burst) then costs
// about one token at one thread's speed, not tens: a fixed 4096 products had made batch-1 decode
// swing between 55 and 70 % of the roofline from run to run on an idle machine.

using Clock = std::chrono::steady_clock;

// Products of one batch size (or of one kind of run: PrefetchTuner), timed together.
struct Window {
    long jobs = 0;
    long rows = 0;
    double weights = 0;
    Clock::duration total{}, waited{};

    // Counts a product; restarts the window first when its batch size differs.
    void add(long batch, double job_weights, Clock::duration job_total, Clock::duration job_waited) {
        if (batch != rows) *this = Window{0, batch};
        ++jobs;
        weights += job_weights;
        total += job_total;
        waited += job_waited;
    }
    double ns_per_weight() const { return std::chrono::duration<double, std::nano>(total).count() / weights; }
};

#ifdef _OPENMP

struct ShareState {
    std::mutex mutex;
    long solo_left = 0;
    long solo_next = 0;  // the next solo period, in products (0: the shortest)
    Window shared, solo;
    long solo_rows = 0;  // the batch size of the last full window run alone, and its pace
    double solo_ns_per_weight = 0;
};

ShareState& share_state() {
    static ShareState* state = new ShareState();  // never destroyed (may be used until exit)
    return *state;
}

constexpr long kWindowJobs = 64;      // about half a decode step of a 30-layer model
constexpr long kMinSoloJobs = 128;    // about one decode step of a 30-layer model
constexpr long kMaxSoloJobs = 4096;   // some tens of tokens

// True when this product should run on the caller alone (counts one solo job).
bool run_alone() {
    ShareState& st = share_state();
    std::lock_guard<std::mutex> lock(st.mutex);
    if (st.solo_left > 0) {
        --st.solo_left;
        return true;
    }
    return false;
}

void account_alone(long batch, double weights, Clock::duration total) {
    ShareState& st = share_state();
    std::lock_guard<std::mutex> lock(st.mutex);
    st.solo.add(batch, weights, total, Clock::duration::zero());
    if (st.solo.jobs < kWindowJobs) return;
    st.solo_rows = batch;
    st.solo_ns_per_weight = st.solo.ns_per_weight();
    st.solo = Window{};
}

void account_shared(long batch, double weights, Clock::duration total, Clock::duration waited) {
    ShareState& st = share_state();
    std::lock_guard<std::mutex> lock(st.mutex);
    st.shared.add(batch, weights, total, waited);
    if (st.shared.jobs < kWindowJobs) return;
    const bool slower = st.solo_rows == batch && st.shared.ns_per_weight() > st.solo_ns_per_weight;
    if (st.shared.waited * 5 > st.shared.total || slower) {
        st.solo_left = std::max(st.solo_next, kMinSoloJobs);
        st.solo_next = std::min(4 * st.solo_left, kMaxSoloJobs);
    } else {
        st.solo_next = 0;
    }
    st.shared = Window{};
}
#endif

// ---- batch-1's prefetch distance, chosen by timing the model's own products --------------------
//
// Whether prefetching ahead of the one weight stream helps depends on the CPU. Measured over a
// 30-layer decode step's products (538 MB fp32): on a Xeon with AVX-512 (2026-12-02, one thread,
// 15-25 alternated runs) 1536 B ahead took float32 from 8.6 to 9.2 GB/s and bfloat16 from 6.6 to
// 8.0 (the hardware prefetcher alone kept too few lines in flight); on an AMD EPYC (Zen 3, AVX2,
// 2026-12-02, 7 alternated runs, median) the same prefetch cost float32 22 % (9.8 -> 7.7 GB/s on one
// core, 16.3 -> 12.6 on two; 768 B: 8.7, 14.4) and moved bfloat16 by under 5 %. No one distance
// suits both, so each weight kind tries kAheadCandidates in turn on its first batch-1 products, a
// window of kTuneJobs products each, and keeps the distance whose fastest window ran fastest, once
// every candidate has kTuneRounds windows under one kind of run (the caller alone, or sharing the
// rows with other threads: their paces differ, so they are compared only among themselves). The
// fastest window, not the mean: a busy machine only ever slows a window down. That takes some 10 decode
// steps of a 30-layer model, up to a third of them slower than the best. The distance moves no bit
// (prefetches change no sum). KVFENCE_PREFETCH_BYTES=N fixes it to N bytes (0: none).
constexpr long kAheadCandidates[] = {0, 768, 1536};
constexpr long kNumAhead = sizeof(kAheadCandidates) / sizeof(kAheadCandidates[0]);
constexpr long kTuneJobs = 64;  // products per window: about half a decode step of a 30-layer model
constexpr long kTuneRounds = 3;

struct PrefetchTuner {
    std::mutex mutex;
    long chosen = -1;  // the distance in bytes once chosen (or fixed), -1 while trying
    long trying = 0;   // index into kAheadCandidates
    Window window;
    double best[2][kNumAhead] = {};  // [shared][candidate]: ns per weight of the fastest window
    long windows[2][kNumAhead] = {};

    long ahead() {
        std::lock_guard<std::mutex> lock(mutex);
        return chosen >= 0 ? chosen : kAheadCandidates[trying];
    }

    // Counts one batch-1 product run with `ahead` (shared: over several threads).
    void record(long ahead, bool shared, double weights, Clock::duration total) {
        std::lock_guard<std::mutex> lock(mutex);
        if (chosen >= 0 || ahead != kAheadCandidates[trying]) return;
        window.add(shared ? 2 : 1, weights, total, Clock::duration::zero());
        if (window.jobs < kTuneJobs) return;
        const int mode = shared ? 1 : 0;
        const double pace = window.ns_per_weight();
        if (windows[mode][trying] == 0 || pace < best[mode][trying]) best[mode][trying] = pace;
        ++windows[mode][trying];
        window = Window{};
        trying = (trying + 1) % kNumAhead;
        if (!std::all_of(windows[mode], windows[mode] + kNumAhead, [](long n) { return n >= kTuneRounds; })) return;
        chosen = kAheadCandidates[std::min_element(best[mode], best[mode] + kNumAhead) - best[mode]];
    }

    // Fixes the distance (bytes >= 0), or starts trying again (bytes < 0).
    void set(long bytes) {
        std::lock_guard<std::mutex> lock(mutex);
        std::fill(&best[0][0], &best[0][0] + 2 * kNumAhead, 0.0);
        std::fill(&windows[0][0], &windows[0][0] + 2 * kNumAhead, 0L);
        window = Window{};
        trying = 0;
        chosen = bytes;
    }
};

// KVFENCE_PREFETCH_BYTES as a distance, or -1 (choose by timing) when unset or not a number >= 0.
long fixed_ahead_from_env() {
    const char* text = std::getenv("KVFENCE_PREFETCH_BYTES");
    if (text == nullptr || *text == '\0') return -1;
    char* end = nullptr;
    const long bytes = std::strtol(text, &end, 10);
    return (*end == '\0' && bytes >= 0) ? bytes : -1;
}

// One tuner per weight kind (0 float32, 1 bfloat16, 2 float16).
PrefetchTuner& prefetch_tuner(long kind) {
    static PrefetchTuner* tuners = [] {
        auto* made = new PrefetchTuner[3];  // never destroyed (may be used until exit)
        const long fixed = fixed_ahead_from_env();
        for (int k = 0; k < 3; ++k) made[k].chosen = fixed;
        return made;
    }();
    return tuners[std::max(0L, std::min(kind, 2L))];
}

// x: [batch, in] with row stride ldx; w: [out, in] contiguous; bias: [out] or null; y: [batch, out]
// contiguous; packed: w as packed_gemm.h's panels ([ceil(out / 16)][in][16]), or null. With
// threads > 1 and at least min_parallel_weights weights, `threads` OpenMP threads share the rows in
// chunks of about 64 KiB of weights; otherwise the caller runs them all. Batches of at least
// broadcast_rows rows run broadcast_gemm.h's register-tiled form over a transposed copy of x
// (packed once, by the caller), smaller batches the dot-product form above; but batches in
// packed_gemm.h's range (2-7 rows) run its tile over the packed panels when they are given.
template <class W>
void linear_w(const float* x, long batch, long ldx, const typename W::T* w, long out, long in,
                        const float* bias, float* y, long min_parallel_weights, long threads, long broadcast_rows,
                        const float* packed) {
    // the panels are float32 copies of float32 weights (packed_weights.py); other weights run without
    if constexpr (W::kind != 0) packed = nullptr;
    const bool panels = packed != nullptr && batch >= kvfence_packed::kMinRows && batch <= kvfence_packed::kMaxRows;
    const bool tiled = !panels && batch >= broadcast_rows;
    const float* xt = nullptr;
    if (tiled && !panels) {
        static thread_local std::vector<float> packed;  // the caller's; workers only read it
        packed.resize(static_cast<size_t>(kvfence_gemm::packed_floats(batch, in)));
        kvfence_gemm::pack_transposed(x, batch, ldx, in, packed.data());
        xt = packed.data();
    }
    // batch 1 runs the dot form with the tuner's prefetch distance, and times itself for the tuner
    PrefetchTuner* tuner = batch == 1 ? &prefetch_tuner(W::kind) : nullptr;
    const long ahead = tuner != nullptr ? tuner->ahead() : 0;
    auto run_rows = [&](long begin, long end, long then_begin = 0, long then_end = 0) {
        if (panels) {
            kvfence_packed::rows_packed(x, batch, ldx, packed, in, bias, y, out, begin, end, then_begin, then_end);
        } else if (tiled) {
            kvfence_gemm::rows_broadcast<W>(xt, batch, in, w, bias, y, out, begin, end, then_begin, then_end);
        } else {
            rows<W>(x, ldx, batch, w, in, bias, y, out, begin, end, ahead);
        }
    };
    const double weights = static_cast<double>(out * in);
    auto run_alone_timed = [&] {
        const auto start = Clock::now();
        run_rows(0, out);
        const auto total = Clock::now() - start;
        if (tuner != nullptr) tuner->record(ahead, false, weights, total);
        return total;
    };
#ifdef _OPENMP
    const bool shareable = threads > 1 && out * in >= min_parallel_weights && !omp_in_parallel();
    if (shareable && run_alone()) {
        account_alone(batch, weights, run_alone_timed());
        return;
    }
    if (shareable) {
        // ~64 KiB of weights per chunk (16384 fp32, 32768 half weights), in whole register tiles (4
        // rows, 12 when tiled, or whole 16-row panels when packed)
        const long unit = panels ? kvfence_packed::kPackWidth : tiled ? kvfence_gemm::kPanelRows : 4;
        const long chunk_weights = 65536 / static_cast<long>(sizeof(typename W::T));
        const long chunk_rows = ((chunk_weights + in - 1) / in + unit - 1) / unit * unit;
        const long num_chunks = (out + chunk_rows - 1) / chunk_rows;
        std::atomic<long> next{0};
        const auto start = Clock::now();
        auto caller_done = start;
#pragma omp parallel num_threads(static_cast<int>(threads))
        {
            // Each thread claims its next chunk before running the current one, so that the tiled
            // form's last panel can prefetch the next chunk's first rows (else every chunk, a third
            // of the panels at 576 inputs, would start on weights not yet fetched).
            long chunk = next.fetch_add(1, std::memory_order_relaxed);
            while (chunk < num_chunks) {
                const long following = next.fetch_add(1, std::memory_order_relaxed);
                const long begin = chunk * chunk_rows;
                const long then = following < num_chunks ? following * chunk_rows : out;
                run_rows(begin, std::min(begin + chunk_rows, out), then, std::min(then + chunk_rows, out));
                chunk = following;
            }
            if (omp_get_thread_num() == 0) caller_done = Clock::now();
        }
        const auto end = Clock::now();
        account_shared(batch, weights, end - start, end - caller_done);
        if (tuner != nullptr) tuner->record(ahead, true, weights, end - start);
        return;
    }
#else
    (void)min_parallel_weights;
    (void)threads;
#endif
    if (tuner != nullptr) {
        run_alone_timed();
    } else {
        run_rows(0, out);
    }
}

void linear_f32(const float* x, long batch, long ldx, const float* w, long out, long in, const float* bias, float* y,
                long min_parallel_weights, long threads, long broadcast_rows, const float* packed) {
    linear_w<WeightF32>(x, batch, ldx, w, out, in, bias, y, min_parallel_weights, threads, broadcast_rows, packed);
}

// linear_f32 over weights stored as `kind` (0 float32, 1 bfloat16, 2 float16), widened on load.
void linear_typed(const float* x, long batch, long ldx, const void* w, long kind, long out, long in,
                  const float* bias, float* y, long min_parallel_weights, long threads, long broadcast_rows,
                  const float* packed) {
    switch (kind) {
        case WeightBF16::kind:
            linear_w<WeightBF16>(x, batch, ldx, static_cast<const std::uint16_t*>(w), out, in, bias, y,
                                 min_parallel_weights, threads, broadcast_rows, nullptr);
            break;
        case WeightF16::kind:
            linear_w<WeightF16>(x, batch, ldx, static_cast<const std::uint16_t*>(w), out, in, bias, y,
                                min_parallel_weights, threads, broadcast_rows, nullptr);
            break;
        default:
            linear_f32(x, batch, ldx, static_cast<const float*>(w), out, in, bias, y, min_parallel_weights, threads,
                       broadcast_rows, packed);
    }
}

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight   (x rows with stride ldx; out contiguous)
void rms_norm_f32(const float* x, long rows, long ldx, long dim, const float* weight, float eps, float* out) {
    for (long r = 0; r < rows; ++r) {
        const float* xr = x + r * ldx;
        float* yr = out + r * dim;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        long i = 0;
        for (; i + 16 <= dim; i += 16) {
            const __m256 a = _mm256_loadu_ps(xr + i), b = _mm256_loadu_ps(xr + i + 8);
            acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(a, a));
            acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(b, b));
        }
        for (; i + 8 <= dim; i += 8) {
            const __m256 a = _mm256_loadu_ps(xr + i);
            acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(a, a));
        }
        float sum = horizontal_sum(_mm256_add_ps(acc0, acc1));
        for (; i < dim; ++i) sum += xr[i] * xr[i];
        const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
        const __m256 inv_v = _mm256_set1_ps(inv);
        i = 0;
        for (; i + 8 <= dim; i += 8)
            _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), inv_v), _mm256_loadu_ps(weight + i)));
        for (; i < dim; ++i) yr[i] = (xr[i] * inv) * weight[i];
    }
}

// out[r, j] = silu(gate_up[r, j]) * gate_up[r, inter + j]; gate_up rows are [gate | up], contiguous.
void silu_mul_f32(const float* gate_up, long rows, long inter, float* out) {
    for (long r = 0; r < rows; ++r) {
        const float* g = gate_up + r * 2 * inter;
        const float* u = g + inter;
        float* y = out + r * inter;
        long j = 0;
        const __m256 one = _mm256_set1_ps(1.0f);
        for (; j + 8 <= inter; j += 8) {  // vectorised exp: a scalar expf per element was most of the time
            const __m256 gv = _mm256_loadu_ps(g + j);
            const __m256 e = exp_clamped(_mm256_sub_ps(_mm256_setzero_ps(), gv));
            _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + j)));
        }
        for (; j < inter; ++j) y[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
    }
}

// Rotate-half RoPE in place on the first `heads` heads of each token:
//   [x1, x2] -> [x1 * cos - x2 * sin, x2 * cos + x1 * sin], cos/sin rows of head_dim / 2.
void rope_f32(float* x, long tokens, long token_stride, long heads, long head_dim, const float* cos,
                      const float* sin, long table_stride) {
    const long half = head_dim / 2;
    for (long t = 0; t < tokens; ++t) {
        const float* c = cos + t * table_stride;
        const float* s = sin + t * table_stride;
        for (long h = 0; h < heads; ++h) {
            float* x1 = x + t * token_stride + h * head_dim;
            float* x2 = x1 + half;
            long i = 0;
            for (; i + 8 <= half; i += 8) {
                const __m256 a = _mm256_loadu_ps(x1 + i), b = _mm256_loadu_ps(x2 + i);
                const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
                _mm256_storeu_ps(x1 + i, _mm256_sub_ps(_mm256_mul_ps(a, cv), _mm256_mul_ps(b, sv)));
                _mm256_storeu_ps(x2 + i, _mm256_add_ps(_mm256_mul_ps(b, cv), _mm256_mul_ps(a, sv)));
            }
            for (; i < half; ++i) {
                const float a = x1[i], b = x2[i];
                x1[i] = a * c[i] - b * s[i];
                x2[i] = b * c[i] + a * s[i];
            }
        }
    }
}

constexpr long kMinParallelFloats = 1L << 16;  // elementwise work below which the caller does it all

// body(begin, end) over rows [0, rows), split into one contiguous range per thread when the work
// (rows * floats_per_row) is large enough and `threads` > 1; the caller alone otherwise.
template <typename Body>
void over_rows(long rows, long floats_per_row, long threads, Body body) {
#ifdef _OPENMP
    if (threads > 1 && rows > 1 && rows * floats_per_row >= kMinParallelFloats && !omp_in_parallel()) {
        const int n = static_cast<int>(std::min(threads, rows));
#pragma omp parallel num_threads(n)
        {
            const long t = omp_get_thread_num(), nt = omp_get_num_threads();
            const long begin = rows * t / nt, end = rows * (t + 1) / nt;
            if (begin < end) body(begin, end);
        }
        return;
    }
#else
    (void)floats_per_row;
    (void)threads;
#endif
    body(0L, rows);
}

// out[r] = the index of the largest of x[r, 0 .. cols), as torch.argmax: the first of equal maxima,
// and the first NaN when the row has one (torch orders NaN above every number). Two vector passes
// over a row (the maximum, then its first position) instead of torch's scalar reduction, which
// took 2.9 ms for the 24 rows x 49152 logits of a decode step.
void argmax_f32(const float* x, long rows, long ld, long cols, long* out) {
    for (long r = 0; r < rows; ++r) {
        const float* row = x + r * ld;
        __m256 best = _mm256_set1_ps(-INFINITY);
        __m256 nan = _mm256_setzero_ps();
        long i = 0;
        for (; i + 8 <= cols; i += 8) {
            const __m256 v = _mm256_loadu_ps(row + i);
            best = _mm256_max_ps(best, v);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, best);
        float top = lanes[0];
        for (int j = 1; j < 8; ++j) top = lanes[j] > top ? lanes[j] : top;
        bool has_nan = _mm256_movemask_ps(nan) != 0;
        for (; i < cols; ++i) {
            if (std::isnan(row[i])) has_nan = true;
            else if (row[i] > top) top = row[i];
        }
        long found = 0;
        if (has_nan) {
            while (!std::isnan(row[found])) ++found;
        } else {
            const __m256 target = _mm256_set1_ps(top);
            long j = 0;
            found = -1;
            for (; j + 8 <= cols; j += 8) {
                const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + j), target, _CMP_EQ_OQ));
                if (hit != 0) {
                    found = j + __builtin_ctz(static_cast<unsigned>(hit));
                    break;
                }
            }
            if (found < 0) {
                for (found = j; found < cols && row[found] != top; ++found) {}
                if (found == cols) found = 0;  // a row of -inf only
            }
        }
        out[r] = found;
    }
}

}  // namespace

// ---- one decoder layer's two halves around attention, in one call each -------------------------
//
// A decode step of a 30-layer model dispatched some 900 torch ops and 200 ctypes calls, each a few
// microseconds of Python and dispatch while the memory bus, which bounds the step, sits idle. The
// halves below do the same work in the same order with the same kernels (so the results are bit
// for bit those of the separate calls), with scratch buffers kept per thread across calls.

struct KvLinear {
    const void* weight;   // [out, in] row-major, stored as `kind` (see linear_typed)
    const float* bias;    // [out] or null
    const float* packed;  // weight as packed_gemm.h's panels, or null
    long out;
    long in;
    long kind;
};

// Mirrored by kvfence/engine/kernels/fused_layer.py (ctypes.Structure, same field order).
struct KvDecoderLayer {
    KvLinear qkv, o, gate_up, down;
    const float* input_norm;  // [hidden]
    const float* post_norm;   // [hidden]
    float eps;
    long hidden, num_heads, num_kv_heads, head_dim;
    long min_parallel_weights, broadcast_rows;
    const float* q_norm;  // [head_dim]: a per-head RMSNorm of q before RoPE (Qwen3), or null
    const float* k_norm;  // the same for k
};

// What a decode step's rows read: the pool slot of each position, from each row's own block table
// (I1), and the visible run of it (causal; a sliding window starts later). A windowed model's
// full-attention layers read another view than its windowed ones.
struct KvDecodeView {
    const long* slots;  // [rows, slots_stride]
    long slots_stride;
    const long* begin;  // [rows]: row b attends to slots[b, begin[b] : end[b]]
    const long* end;
};

// One layer's KV pool (kvfence_decode_step_f32). Mirrored by kvfence/engine/kernels/decode_step.py.
struct KvLayerAttention {
    void* k_cache;  // [num_slots, num_kv_heads, head_dim], stored as kv_kind (0 float32, 1 bfloat16, 2 float16)
    void* v_cache;
    long num_slots;
    long kv_kind;
    long view;  // which KvDecodeView this layer reads
    float scale;
};

namespace {

float* scratch(std::vector<float>& buffer, long floats) {
    if (buffer.size() < static_cast<size_t>(floats)) buffer.resize(static_cast<size_t>(floats));
    return buffer.data();
}

void run_linear(const KvDecoderLayer& layer, const KvLinear& lin, const float* x, long rows, long ldx, float* y,
                long threads) {
    linear_typed(x, rows, ldx, lin.weight, lin.kind, lin.out, lin.in, lin.bias, y, layer.min_parallel_weights,
                 threads, layer.broadcast_rows, lin.packed);
}

}  // namespace

extern "C" {

// x: [batch, in] with row stride ldx; w: [out, in] contiguous; bias: [out] or null; y: [batch, out]
// contiguous; packed: w's panels or null. See linear_f32.
void kvfence_linear_f32(const float* x, long batch, long ldx, const float* w, long out, long in,
                        const float* bias, float* y, long min_parallel_weights, long threads, long broadcast_rows,
                        const float* packed) {
    linear_f32(x, batch, ldx, w, out, in, bias, y, min_parallel_weights, threads, broadcast_rows, packed);
}

// kvfence_linear_f32 over weights stored as `kind` (0 float32, 1 bfloat16, 2 float16): each weight
// widened to float32 as it is loaded, every sum accumulated in float32.
void kvfence_linear_typed(const float* x, long batch, long ldx, const void* w, long kind, long out, long in,
                          const float* bias, float* y, long min_parallel_weights, long threads, long broadcast_rows,
                          const float* packed) {
    linear_typed(x, batch, ldx, w, kind, out, in, bias, y, min_parallel_weights, threads, broadcast_rows, packed);
}

// The three elementwise kernels below share rows over `threads` threads for large batches (over_rows).
void kvfence_rms_norm_f32(const float* x, long rows, long ldx, long dim, const float* weight, float eps, float* out,
                          long threads) {
    over_rows(rows, dim, threads, [&](long begin, long end) {
        rms_norm_f32(x + begin * ldx, end - begin, ldx, dim, weight, eps, out + begin * dim);
    });
}

void kvfence_silu_mul_f32(const float* gate_up, long rows, long inter, float* out, long threads) {
    over_rows(rows, 3 * inter, threads, [&](long begin, long end) {
        silu_mul_f32(gate_up + begin * 2 * inter, end - begin, inter, out + begin * inter);
    });
}

void kvfence_rope_f32(float* x, long tokens, long token_stride, long heads, long head_dim, const float* cos,
                      const float* sin, long table_stride, long threads) {
    over_rows(tokens, heads * head_dim, threads, [&](long begin, long end) {
        rope_f32(x + begin * token_stride, end - begin, token_stride, heads, head_dim, cos + begin * table_stride,
                 sin + begin * table_stride, table_stride);
    });
}

// The tile the products use, 0 AVX2 or 1 AVX-512 (broadcast_gemm.h), lowered to `wanted` when that
// is less than what the CPU has (never raised); returns the level now in use. A negative `wanted`
// only asks.
long kvfence_gemm_isa(long wanted) {
    return wanted < 0 ? kvfence_gemm::isa() : kvfence_gemm::set_isa(static_cast<int>(wanted));
}

// Batch-1 products' prefetch distance for weight kind `kind` (0 float32, 1 bfloat16, 2 float16):
// `bytes` >= 0 fixes it, -1 starts choosing it again by timing, -2 only asks. Returns the distance
// in use, or -1 while it is still being chosen.
long kvfence_prefetch_bytes(long kind, long bytes) {
    PrefetchTuner& tuner = prefetch_tuner(kind);
    if (bytes >= -1) tuner.set(bytes);
    std::lock_guard<std::mutex> lock(tuner.mutex);
    return tuner.chosen;
}

void kvfence_argmax_f32(const float* x, long rows, long ld, long cols, long* out) {
    argmax_f32(x, rows, ld, cols, out);
}

// Before attention: qkv = qkv_proj(rms_norm(x)) (+ bias), then RoPE on its query and key heads.
// x: [rows, hidden] with row stride ldx; cos, sin: rows of head_dim / 2 with stride table_stride;
// qkv: [rows, (num_heads + 2 num_kv_heads) * head_dim] contiguous.
void kvfence_layer_pre_f32(const KvDecoderLayer* layer, const float* x, long rows, long ldx, const float* cos,
                           const float* sin, long table_stride, float* qkv, long threads) {
    static thread_local std::vector<float> normed_buf;
    float* normed = scratch(normed_buf, rows * layer->hidden);
    rms_norm_f32(x, rows, ldx, layer->hidden, layer->input_norm, layer->eps, normed);
    run_linear(*layer, layer->qkv, normed, rows, layer->hidden, qkv, threads);
    const long width = layer->qkv.out, d = layer->head_dim;
    for (long t = 0; t < rows; ++t) {  // in place, row by row: the per-op path's rms_norm over [T * heads, D]
        float* q = qkv + t * width;
        if (layer->q_norm != nullptr) rms_norm_f32(q, layer->num_heads, d, d, layer->q_norm, layer->eps, q);
        float* k = q + layer->num_heads * d;
        if (layer->k_norm != nullptr) rms_norm_f32(k, layer->num_kv_heads, d, d, layer->k_norm, layer->eps, k);
    }
    rope_f32(qkv, rows, layer->qkv.out, layer->num_heads + layer->num_kv_heads, layer->head_dim, cos, sin,
             table_stride);
}

// After attention: h = x + o_proj(attn); out = h + down(silu(gate) * up), [gate | up] = gate_up(rms_norm(h)).
// attn: [rows, num_heads * head_dim] with row stride ld_attn; x: [rows, hidden] with row stride
// ldx; out: [rows, hidden] contiguous (may not alias x or attn).
void kvfence_layer_post_f32(const KvDecoderLayer* layer, const float* attn, long rows, long ld_attn, const float* x,
                            long ldx, float* out, long threads) {
    static thread_local std::vector<float> proj_buf, normed_buf, gate_up_buf, act_buf;
    const long hidden = layer->hidden;
    const long inter = layer->down.in;
    float* proj = scratch(proj_buf, rows * hidden);
    float* normed = scratch(normed_buf, rows * hidden);
    float* gate_up = scratch(gate_up_buf, rows * 2 * inter);
    float* act = scratch(act_buf, rows * inter);
    run_linear(*layer, layer->o, attn, rows, ld_attn, proj, threads);
    for (long r = 0; r < rows; ++r)
        for (long i = 0; i < hidden; ++i) out[r * hidden + i] = x[r * ldx + i] + proj[r * hidden + i];
    rms_norm_f32(out, rows, hidden, hidden, layer->post_norm, layer->eps, normed);
    run_linear(*layer, layer->gate_up, normed, rows, hidden, gate_up, threads);
    silu_mul_f32(gate_up, rows, inter, act);
    run_linear(*layer, layer->down, act, rows, inter, proj, threads);
    for (long r = 0; r < rows; ++r)
        for (long i = 0; i < hidden; ++i) out[r * hidden + i] += proj[r * hidden + i];
}


// A whole decode step's decoder layers in one call: for each layer, pre (RMSNorm, qkv, q/k norms,
// RoPE), the new K/V rows into the pool at slot_mapping, paged attention of each row over its own
// slots (the per-layer kernels of paged_attention.h), post. Between a step's ~120 products there is
// then no Python and no dispatch: the per-layer path's returns to Python around attention cost
// 0.13-0.15 ms a layer (SmolLM-135M shape, bf16, batch 1: 3.8 ms of a token at one thread, 4.6 ms
// at two, where the other threads waited; 2026-12-02). Same kernels, same order: the results are bit for
// bit those of kvfence_layer_pre_f32, kvfence_write_kv_*, kvfence_paged_decode_* and
// kvfence_layer_post_f32 called in turn.
// views: what each layer's attention reads (KvLayerAttention::view); x: [rows, hidden] with row
// stride ldx (one decode token per sequence); cos, sin: rows of
// head_dim / 2 with stride table_stride (the same for every layer); slot_mapping: [rows]; out:
// [rows, hidden] contiguous (may not alias x). Returns 0; 1 when a slot of slot_mapping is outside
// a layer's pool (checked for every layer before anything is written); 2 when a layer's heads do
// not fit its pool (heads not a multiple of kv_heads, or a 2-byte pool with head_dim not a multiple
// of 8). On a non-zero return `out` and the pools are untouched.
int kvfence_decode_step_f32(const KvDecoderLayer* const* layers, const KvLayerAttention* attention, long num_layers,
                            const KvDecodeView* views, const float* x, long rows, long ldx, const float* cos, const float* sin,
                            long table_stride, const long* slot_mapping, float* out, long threads) {
    for (long l = 0; l < num_layers; ++l) {
        const KvDecoderLayer& layer = *layers[l];
        const long kv = layer.num_kv_heads;
        if (kv < 1 || layer.num_heads % kv != 0 || (attention[l].kv_kind != 0 && layer.head_dim % 8 != 0)) return 2;
        for (long t = 0; t < rows; ++t)
            if (slot_mapping[t] < 0 || slot_mapping[t] >= attention[l].num_slots) return 1;
    }
    static thread_local std::vector<float> qkv_buf, attn_buf, hidden_buf[2];
    const float* cur = x;
    long ld = ldx;
    for (long l = 0; l < num_layers; ++l) {
        const KvDecoderLayer& layer = *layers[l];
        const KvLayerAttention& at = attention[l];
        const long d = layer.head_dim, heads = layer.num_heads, kv = layer.num_kv_heads;
        const long width = layer.qkv.out;
        float* qkv = scratch(qkv_buf, rows * width);
        float* attn = scratch(attn_buf, rows * heads * d);
        kvfence_layer_pre_f32(&layer, cur, rows, ld, cos, sin, table_stride, qkv, threads);
        kvfence_attention::write_kv_any(at.kv_kind, qkv + heads * d, qkv + (heads + kv) * d, width, rows, kv * d,
                                        slot_mapping, at.num_slots, at.k_cache, at.v_cache);
        const KvDecodeView& view = views[at.view];
        kvfence_attention::paged_decode_any(at.kv_kind, qkv, width, rows, heads, kv, d, at.k_cache, at.v_cache,
                                            view.slots, view.slots_stride, view.begin, view.end, at.scale, attn);
        float* next = l + 1 == num_layers ? out : scratch(hidden_buf[l % 2], rows * layer.hidden);
        kvfence_layer_post_f32(&layer, attn, rows, heads * d, cur, ld, next, threads);
        cur = next;
        ld = layer.hidden;
    }
    return 0;
}

}  // extern "C"
