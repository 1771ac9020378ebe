"""Detection: which spans of a request are personal data or secrets, and which topics raise its class.

- ``detector.py``: the detector run on every message (the rule scanner, optionally Presidio);
- ``scanner.py``: a rule (precompiled regex + validator + context) and the scanner that runs a rule set;
- ``recognizers/``: the rules themselves, one kind per module;
- ``normalise.py``: the folding of disguises (Unicode look-alikes, spacing) with a map back to the text;
- ``encoded.py``, ``concatenated.py``, ``split_values.py``: values hidden in base64/hex, string
  concatenations, or split across two texts of one request;
- ``topics.py``: sensitive topics that raise a data class without marking a span;
- ``presidio_engine.py``: Presidio's analyzer, offline, as an operator's option;
- ``findings.py``: what a detector reports, a typed span.
"""
