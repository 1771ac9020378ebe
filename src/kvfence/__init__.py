"""kvfence: an LLM serving stack where one tenant's prompt never reaches another tenant's answer.

Three parts share this package (see DESIGN.md of the project):

- :mod:`kvfence.engine` -- paged-KV inference engine; the isolation contract I1-I4 lives in
  :mod:`kvfence.engine.kv.block_manager` and is enforced there.
- :mod:`kvfence.server` -- ``kvfence serve``, the OpenAI-compatible HTTP server (I3, I5 at the edge).
- :mod:`kvfence.gateway` -- ``kvfence gateway``, a proxy in front of any OpenAI-compatible backend.
- :mod:`kvfence.audit` -- ``kvfence audit``, black-box isolation tests of any endpoint.
"""

__version__ = "0.1.0"
