"""Cross-tenant leak detection in answers: n-gram fingerprints of recent prompts, and canaries.

- ``fingerprint.py``: keyed fingerprints of word n-grams (no plaintext is stored);
- ``index.py``: where fingerprints live, in this process or in Redis for several replicas;
- ``scan.py``: an answer carrying runs found only in another tenant's prompts, or a canary, is a leak;
- ``ordinary.py``: which words are ordinary language (a withheld run of them may become common);
- ``notice.py``: the notice a team sends its own customers after a suspected leak.
"""
