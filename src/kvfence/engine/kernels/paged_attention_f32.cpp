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
// The pool may also hold K/V in bfloat16 or float16 (the engine's kv_cache_dtype): the entry points
// kvfence_paged_decode_bf16kv / _f16kv read 2-byte elements, widened to float32 on load (bf16 by a
// 16-bit shift, fp16 by F16C's vcvtph2ps), for head_dim a multiple of 8; all arithmetic stays
// float32, so the result equals float32 attention over the rounded K/V. Half the bytes per step:
// decode attention over long contexts is bound by reading K/V.
//
// Softmax is exact (scores kept, max subtracted, then normalised), in float32.
// Compiled with -ffp-contract=off like the other kernels, so rounding matches separate ops.
//
// Layouts: q [B, H, D] with row stride q_stride; k_cache, v_cache [num_slots, KV, D] contiguous;
// slots [B, slots_stride] int64; begin, end [B] int64; out [B, H, D] contiguous.
// Built at first use by kvfence/engine/kernels/build.py; called through ctypes. No torch headers.

#include "paged_attention.h"

using namespace kvfence_attention;


extern "C" {

// k, v: [tokens, width] float32 rows with row stride token_stride (width = kv_heads * head_dim);
// the pools [num_slots, width] in float32 / bfloat16 / float16. Row t goes to pool row slots[t].
int kvfence_write_kv_f32(const float* k, const float* v, long token_stride, long tokens, long width,
                         const long* slots, long num_slots, float* k_cache, float* v_cache) {
    return write_kv(k, v, token_stride, tokens, width, slots, num_slots, k_cache, v_cache);
}

int kvfence_write_kv_bf16(const float* k, const float* v, long token_stride, long tokens, long width,
                          const long* slots, long num_slots, unsigned short* k_cache, unsigned short* v_cache) {
    return write_kv(k, v, token_stride, tokens, width, slots, num_slots, reinterpret_cast<bf16_t*>(k_cache),
                    reinterpret_cast<bf16_t*>(v_cache));
}

int kvfence_write_kv_f16(const float* k, const float* v, long token_stride, long tokens, long width,
                         const long* slots, long num_slots, unsigned short* k_cache, unsigned short* v_cache) {
    return write_kv(k, v, token_stride, tokens, width, slots, num_slots, reinterpret_cast<f16_t*>(k_cache),
                    reinterpret_cast<f16_t*>(v_cache));
}

// Returns 0, or 1 when heads is not a multiple of kv_heads.
int kvfence_paged_decode_f32(const float* q, long q_stride, long batch, long heads, long kv_heads, long head_dim,
                             const float* k_cache, const float* v_cache, const long* slots, long slots_stride,
                             const long* begin, const long* end, float scale, float* out) {
    return paged_decode_any(0, q, q_stride, batch, heads, kv_heads, head_dim, k_cache, v_cache, slots, slots_stride,
                            begin, end, scale, out);
}

// The same over a bfloat16 / float16 pool (raw 16-bit elements). Returns 0, 1 as above, or 2 when
// head_dim is not a multiple of 8.
int kvfence_paged_decode_bf16kv(const float* q, long q_stride, long batch, long heads, long kv_heads, long head_dim,
                                const unsigned short* k_cache, const unsigned short* v_cache, const long* slots,
                                long slots_stride, const long* begin, const long* end, float scale, float* out) {
    return paged_decode_any(1, q, q_stride, batch, heads, kv_heads, head_dim, k_cache, v_cache, slots, slots_stride,
                            begin, end, scale, out);
}

int kvfence_paged_decode_f16kv(const float* q, long q_stride, long batch, long heads, long kv_heads, long head_dim,
                               const unsigned short* k_cache, const unsigned short* v_cache, const long* slots,
                               long slots_stride, const long* begin, const long* end, float scale, float* out) {
    return paged_decode_any(2, q, q_stride, batch, heads, kv_heads, head_dim, k_cache, v_cache, slots, slots_stride,
                            begin, end, scale, out);
}

}  // extern "C"
