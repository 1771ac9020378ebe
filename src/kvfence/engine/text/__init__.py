"""Text in and out: tokenizers that match transformers', chat templates, incremental detokenizing.

- ``tokenizer.py``, ``tokenizer_classes.py``: a local ``tokenizer.json``, tokens equal to ``AutoTokenizer``'s;
- ``chat_template.py``: the sandboxed Jinja2 environment chat templates render in;
- ``detokenizer.py``: incremental, UTF-8-safe detokenizing with stop strings.
"""
