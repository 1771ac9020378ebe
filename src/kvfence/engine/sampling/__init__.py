"""What a request asks of the sampler: parameters, defaults, several choices, prompt log-probabilities.

- ``sampling_params.py``: :class:`SamplingParams`, validated once when built;
- ``generation_defaults.py``: a checkpoint's ``generation_config.json`` defaults, as vLLM applies them;
- ``parallel_sampling.py``: ``n`` and ``best_of``; ``prompt_logprobs.py``: prompt log-probabilities.
"""
