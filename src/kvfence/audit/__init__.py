"""kvfence.audit: black-box isolation tests of any OpenAI-compatible endpoint (``kvfence audit``).

Layout, one idea per module:

* ``target`` (who and what is audited), ``client`` (the only HTTP code; times the first token),
  ``discovery`` (context and KV capacity from vLLM, SGLang, llama.cpp, TGI, Ollama, kvfence, with
  the source named; tokens per letter);
* pure logic: ``prompts`` (random letters and syllables, canaries), ``stats`` (KS test, effect
  sizes), ``sequential`` (when a cache-sharing level is decided: looks, error rates, power),
  ``sharing_policy`` (levels and the cache-sharing verdict, I6 from outside), ``scan`` (canaries and
  runs of a victim's words, with the false-alarm bound), ``advisories`` (known isolation defects),
  ``verdict`` (results, severities, exit codes);
* the checks: ``cache_sharing``, ``eviction`` (another scope's traffic evicting my cache, I6),
  ``admission`` (I3 from outside), ``leak`` (I1/I2 from outside), ``fingerprint`` (the ``engine``
  check);
* output: ``plots``, ``report`` (JSON, Markdown, HTML), ``questionnaire``; ``cli`` wires it up.
"""

from kvfence.audit.verdict import CheckResult, Evidence, Severity, Verdict

__all__ = ["CheckResult", "Evidence", "Severity", "Verdict"]
