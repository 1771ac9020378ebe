"""The paged KV cache: where isolation invariants I1, I2, I3 and I6 are enforced (no torch here).

- ``block_manager.py``: the page allocator and its ownership ledger (I1: who may read a page; I2: scrubbing);
- ``cache_partition.py``: unreferenced prefix pages wait per scope for a same-scope revival (I6);
- ``capacity.py``: pool sizing and the start-up half of admission (I3);
- ``shared_prefill.py``: identical prompts of one scope are prefilled once.
"""
