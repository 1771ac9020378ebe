// fp32 kernels for the decode step on x86-64 CPUs with AVX2 and FMA.
//
// kvfence_linear_f32: y[b, o] = sum_i x[b, i] * w[o, i] + bias[o] for a few rows b. Batch-1 (and
// small-batch) decode reads every weight once per token, so it is bound by memory bandwidth.
// torch's fp32 F.linear on one row runs on one thread here and streams weights at a third of the
// machine's bandwidth; this kernel streams each weight row once for the whole batch, in the
// checkpoint's natural [out, in] row-major layout, and shares the rows out to helper threads.
//
// Why its own helper threads and not OpenMP: an OpenMP region ends at a barrier, so on a busy
// machine every product waits for the slowest thread to be scheduled again (measured: 3x slower
// than one thread, 121 products per token). Here the calling thread claims chunks of rows from a
// shared counter like the helpers do and waits only for chunks a helper actually took: if no
// helper is running, the caller does all the work and never waits.
//
// kvfence_rms_norm_f32, kvfence_silu_mul_f32, kvfence_rope_f32: the decode step's elementwise work
// in one call each, where torch runs 3 to 12 small ops (each a few microseconds of dispatch).
// They run on the calling thread: at decode sizes waking other threads costs more than it saves.
// Compiled with -ffp-contract=off so a*b - c*d rounds as torch's separate ops do.
//
// Built at first use by kvfence/engine/kernels/build.py; called through ctypes. No torch headers,
// so it compiles in about a second.

#include <immintrin.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace {

constexpr long kBatchChunk = 4;  // batch rows that share one pass over a block of weight rows

inline float horizontal_sum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_hadd_ps(lo, lo);
    lo = _mm_hadd_ps(lo, lo);
    return _mm_cvtss_f32(lo);
}

// R weight rows x B batch rows: R*B accumulators stay in registers; each weight vector is loaded
// once and used B times.
template <int R, int B>
inline void block(const float* w, long in, const float* x, long ldx, float* y, long ldy, const float* bias) {
    __m256 acc[R][B];
    for (int r = 0; r < R; ++r)
        for (int b = 0; b < B; ++b) acc[r][b] = _mm256_setzero_ps();
    long i = 0;
    for (; i + 8 <= in; i += 8) {
        __m256 xv[B];
        for (int b = 0; b < B; ++b) xv[b] = _mm256_loadu_ps(x + b * ldx + i);
        for (int r = 0; r < R; ++r) {
            const __m256 wv = _mm256_loadu_ps(w + r * in + i);
            for (int b = 0; b < B; ++b) acc[r][b] = _mm256_fmadd_ps(wv, xv[b], acc[r][b]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int b = 0; b < B; ++b) {
            float s = horizontal_sum(acc[r][b]);
            for (long j = i; j < in; ++j) s += w[r * in + j] * x[b * ldx + j];
            y[b * ldy + r] = bias != nullptr ? s + bias[r] : s;
        }
    }
}

template <int R>
inline void rows_block(const float* w, long in, const float* x, long ldx, long batch, float* y, long ldy,
                       const float* bias) {
    // The block's weight rows (R * in floats) stay in L1 across the batch chunks, so memory reads
    // each weight once however large the batch.
    long b = 0;
    for (; b + kBatchChunk <= batch; b += kBatchChunk) block<R, 4>(w, in, x + b * ldx, ldx, y + b * ldy, ldy, bias);
    switch (batch - b) {
        case 3: block<R, 3>(w, in, x + b * ldx, ldx, y + b * ldy, ldy, bias); break;
        case 2: block<R, 2>(w, in, x + b * ldx, ldx, y + b * ldy, ldy, bias); break;
        case 1: block<R, 1>(w, in, x + b * ldx, ldx, y + b * ldy, ldy, bias); break;
        default: break;
    }
}

void rows(const float* x, long ldx, long batch, const float* w, long in, const float* bias, float* y, long ldy,
          long row_begin, long row_end) {
    constexpr int R = 4;
    long o = row_begin;
    for (; o + R <= row_end; o += R)
        rows_block<R>(w + o * in, in, x, ldx, batch, y + o, ldy, bias != nullptr ? bias + o : nullptr);
    for (; o < row_end; ++o)
        rows_block<1>(w + o * in, in, x, ldx, batch, y + o, ldy, bias != nullptr ? bias + o : nullptr);
}

// ---- helper threads for the products ---------------------------------------------------------
//
// One job at a time (the engine drives one forward pass at a time; a lock keeps concurrent callers
// correct, just serial). The job's state is one 64-bit word: epoch (24 bits) | number of chunks
// (20 bits) | next chunk to claim (20 bits), so a claim is a single compare-and-swap that also
// proves the job is still the one whose fields the claimer is about to read.

struct LinearJob {
    const float* x;
    long batch, ldx;
    const float* w;
    long out, in;
    const float* bias;
    float* y;
    long chunk_rows;
};

constexpr int kChunkBits = 20;
constexpr uint64_t kChunkMask = (uint64_t{1} << kChunkBits) - 1;
constexpr long kMaxChunks = static_cast<long>(kChunkMask);

inline uint64_t pack(uint64_t epoch, uint64_t chunks, uint64_t next) {
    return (epoch << (2 * kChunkBits)) | (chunks << kChunkBits) | next;
}

void run_chunk(const LinearJob& job, long chunk) {
    const long begin = chunk * job.chunk_rows;
    const long end = begin + job.chunk_rows < job.out ? begin + job.chunk_rows : job.out;
    rows(job.x, job.ldx, job.batch, job.w, job.in, job.bias, job.y, job.out, begin, end);
}

class HelperPool {
  public:
    // Run the job over `threads` threads (the caller included), or on the caller alone while the
    // helpers are found to make it wait (a busy machine, see below).
    void run(const LinearJob& job, long num_chunks, long threads) {
        std::lock_guard<std::mutex> one_job(job_mutex_);
        if (solo_jobs_left_ > 0) {
            --solo_jobs_left_;
            for (long chunk = 0; chunk < num_chunks; ++chunk) run_chunk(job, chunk);
            return;
        }
        const auto start = Clock::now();
        ensure_helpers(threads - 1);
        active_helpers_.store(threads - 1);
        job_ = job;
        done_.store(0);
        epoch_ = (epoch_ + 1) & 0xFFFFFF;
        state_.store(pack(epoch_, static_cast<uint64_t>(num_chunks), 0));  // publishes job_ (seq_cst)
        if (sleepers_.load() > 0) {
            std::lock_guard<std::mutex> lock(sleep_mutex_);
            wake_.notify_all();
        }
        long mine = 0;
        long chunk;
        while ((chunk = claim(epoch_)) >= 0) {
            run_chunk(job_, chunk);
            ++mine;
        }
        // Wait only for chunks helpers claimed (they are running them now, unless the OS has
        // taken their core away: then yield, in case it is this core they wait for).
        const auto mine_done = Clock::now();
        for (int i = 0; done_.load(std::memory_order_acquire) + mine < num_chunks; ++i) {
            if (i < 2000) {
                _mm_pause();
            } else {
                std::this_thread::yield();
            }
        }
        account(start, mine_done, Clock::now());
    }

  private:
    using Clock = std::chrono::steady_clock;

    // On a machine busier than its cores, a helper that claimed a chunk is often descheduled in
    // the middle of it and the caller waits a whole time slice: far slower than running alone.
    // When waiting takes over a fifth of the time of a window of jobs, run the next jobs alone.
    void account(Clock::time_point start, Clock::time_point mine_done, Clock::time_point end) {
        window_total_ += end - start;
        window_waited_ += end - mine_done;
        if (++window_jobs_ < kWindowJobs) return;
        if (window_waited_ * 5 > window_total_) solo_jobs_left_ = kSoloJobs;
        window_jobs_ = 0;
        window_total_ = window_waited_ = Clock::duration::zero();
    }

    static constexpr long kWindowJobs = 64;  // about half a decode step of a 30-layer model
    static constexpr long kSoloJobs = 4096;  // then try helpers again (some tens of tokens later)
    long solo_jobs_left_ = 0;
    long window_jobs_ = 0;
    Clock::duration window_total_{}, window_waited_{};

  private:
    // A chunk of job `epoch`, or -1 when all are claimed or the job is no longer current.
    long claim(uint64_t epoch) {
        uint64_t s = state_.load();
        for (;;) {
            const uint64_t chunks = (s >> kChunkBits) & kChunkMask, next = s & kChunkMask;
            if ((s >> (2 * kChunkBits)) != epoch || next >= chunks) return -1;
            if (state_.compare_exchange_weak(s, s + 1)) return static_cast<long>(next);
        }
    }

    void ensure_helpers(long wanted) {
        for (; num_helpers_ < wanted; ++num_helpers_) {
            const long index = num_helpers_;
            std::thread([this, index] { helper_loop(index); }).detach();  // they live as long as the process
        }
    }

    void helper_loop(long index) {
        uint64_t seen = state_.load() >> (2 * kChunkBits);
        for (;;) {
            uint64_t epoch = wait_for_job(seen);
            seen = epoch;
            if (index >= active_helpers_.load()) continue;  // fewer threads wanted now
            long chunk;
            while ((chunk = claim(epoch)) >= 0) {
                run_chunk(job_, chunk);
                done_.fetch_add(1, std::memory_order_release);
            }
        }
    }

    // Spin a little (jobs of one decode step come tens of microseconds apart), then sleep, so an
    // idle engine or a busy machine does not lose a core to spinning.
    uint64_t wait_for_job(uint64_t seen) {
        const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
        for (int i = 0;; ++i) {
            const uint64_t epoch = state_.load() >> (2 * kChunkBits);
            if (epoch != seen) return epoch;
            _mm_pause();
            if ((i & 255) == 255 && std::chrono::steady_clock::now() > spin_until) break;
        }
        std::unique_lock<std::mutex> lock(sleep_mutex_);
        sleepers_.fetch_add(1);
        uint64_t epoch;
        while ((epoch = state_.load() >> (2 * kChunkBits)) == seen) wake_.wait(lock);
        sleepers_.fetch_sub(1);
        return epoch;
    }

    std::mutex job_mutex_;
    LinearJob job_{};
    uint64_t epoch_ = 0;
    std::atomic<uint64_t> state_{0};
    std::atomic<long> done_{0};
    std::atomic<long> active_helpers_{0};
    std::atomic<int> sleepers_{0};
    std::mutex sleep_mutex_;
    std::condition_variable wake_;
    long num_helpers_ = 0;
};

HelperPool& helper_pool() {
    // Never destroyed: detached helpers use it until exit. A new one after fork(), whose child has
    // none of the parent's threads (and maybe a mutex some helper held at that instant).
    static std::mutex guard;
    static HelperPool* pool = nullptr;
    static pid_t owner = 0;
    std::lock_guard<std::mutex> lock(guard);
    if (pool == nullptr || owner != getpid()) {
        pool = new HelperPool();
        owner = getpid();
    }
    return *pool;
}

}  // namespace

extern "C" {

// x: [batch, in] with row stride ldx; w: [out, in] contiguous; bias: [out] or null; y: [batch, out]
// contiguous. With threads > 1 and at least min_parallel_weights weights, helper threads share
// the rows (chunks of about 64 KiB of weights); otherwise the caller runs them all.
void kvfence_linear_f32(const float* x, long batch, long ldx, const float* w, long out, long in,
                        const float* bias, float* y, long min_parallel_weights, long threads) {
    if (threads <= 1 || out * in < min_parallel_weights) {
        rows(x, ldx, batch, w, in, bias, y, out, 0, out);
        return;
    }
    long chunk_rows = ((16384 + in - 1) / in + 3) / 4 * 4;  // ~64 KiB of fp32 weights, whole blocks of 4
    while ((out + chunk_rows - 1) / chunk_rows > kMaxChunks) chunk_rows *= 2;
    const long num_chunks = (out + chunk_rows - 1) / chunk_rows;
    helper_pool().run(LinearJob{x, batch, ldx, w, out, in, bias, y, chunk_rows}, num_chunks, threads);
}

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight   (x rows with stride ldx; out contiguous)
void kvfence_rms_norm_f32(const float* x, long rows, long ldx, long dim, const float* weight, float eps, float* out) {
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
void kvfence_silu_mul_f32(const float* gate_up, long rows, long inter, float* out) {
    for (long r = 0; r < rows; ++r) {
        const float* g = gate_up + r * 2 * inter;
        const float* u = g + inter;
        float* y = out + r * inter;
        for (long j = 0; j < inter; ++j) y[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
    }
}

// Rotate-half RoPE in place on the first `heads` heads of each token:
//   [x1, x2] -> [x1 * cos - x2 * sin, x2 * cos + x1 * sin], cos/sin rows of head_dim / 2.
void kvfence_rope_f32(float* x, long tokens, long token_stride, long heads, long head_dim, const float* cos,
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

}  // extern "C"
