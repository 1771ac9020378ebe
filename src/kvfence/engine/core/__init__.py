"""The engine loop: requests in, one mixed batch per step, incremental outputs out.

- ``engine_core.py``: :class:`EngineCore`, the model on its KV pool and the one step every loop runs
  (single-process engine, disaggregated decode worker, prefill worker);
- ``llm_engine.py``: :class:`LLMEngine`, the single-process front end the server and ``LLM`` drive;
- ``requests.py``: one request's checks (I3), sampling state, text and output, shared by the front ends;
- ``scheduler.py``: continuous batching over the block manager: admission (I3), chunked prefill, preemption;
- ``sequence.py``: one request as the engine sees it; ``outputs.py``: what the engine hands back;
- ``fault_isolation.py``: a failing forward pass aborts only the request(s) that make it fail.
"""
