"""The OpenAI-compatible endpoints of ``kvfence serve``: request models, serving, answer shapes.

- ``protocol.py``: request bodies (completions, chat), validated once at the edge;
- ``prepare.py``: a validated request to engine inputs; ``serving.py``: the generation endpoints;
- ``responses.py``, ``choices.py``, ``prompt_scores.py``: answer bodies, stream chunks, choices, logprobs;
- ``tools.py``, ``structured.py``: tool calls and structured outputs through a grammar;
- ``tokenize.py``: ``/tokenize`` and ``/detokenize``; ``streaming.py``: client disconnects abort requests.
"""
