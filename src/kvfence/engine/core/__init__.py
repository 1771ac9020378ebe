"""The engine loop: requests in, one mixed batch per step, incremental outputs out.

- ``llm_engine.py``: :class:`LLMEngine`, the step-wise engine the server and ``LLM`` drive;
- ``scheduler.py``: continuous batching over the block manager: admission (I3), chunked prefill, preemption;
- ``sequence.py``: one request as the engine sees it; ``outputs.py``: what the engine hands back;
- ``fault_isolation.py``: a failing forward pass aborts only the request(s) that make it fail.
"""
