"""The paged KV cache: where isolation invariants I1, I2, I3 and I6 are enforced (no torch here).

- ``page_ledger.py``: page states, the free list, the scrub list, generations, block tables and their audits
  (I1: who may read a page; I2: what owes a zero-fill);
- ``prefix_index.py``: which sealed page holds which cache scope's prefix (I1's hash, scope and token checks);
- ``block_manager.py``: the page allocator that composes the two with the prefix-cache budget;
- ``cache_partition.py``: unreferenced prefix pages wait per scope for a same-scope revival (I6);
- ``capacity.py``: pool sizing and the start-up half of admission (I3);
- ``shared_prefill.py``: identical prompts of one scope are prefilled once.
"""
