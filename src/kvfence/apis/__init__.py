"""kvfence.apis: the request and answer shapes of the APIs clients speak besides chat completions.

Pure translation, no I/O, shared by ``kvfence serve`` (which runs every API on its chat path) and
``kvfence gateway`` (which routes each API natively and translates only where a backend speaks only
the other one):

- ``responses.py``: OpenAI Responses (``/v1/responses``): request -> chat completion request; a chat
  answer -> a Response object; chat stream chunks -> the typed Responses event stream;
- ``messages.py``: Anthropic Messages (``/v1/messages``): the same three translations, and
  Anthropic's error shape;
- ``embeddings.py``: the ``/v1/embeddings`` request (text inputs only).

A field that does not translate is refused with :class:`kvfence.errors.RequestError` naming it,
never dropped in silence (``docs/apis.md`` lists them).
"""
