"""kvfence.audit: black-box isolation tests of any OpenAI-compatible endpoint (``kvfence audit``).

Layout, one idea per module:

* ``target`` (who and what is audited), ``client`` (the only HTTP code; times the first token),
  ``discovery`` (advertised context, KV capacity, tokens per letter);
* pure logic: ``prompts`` (random prompts, canaries), ``stats`` (KS test, effect sizes),
  ``sharing_policy`` (levels and the cache-sharing verdict, I6 from outside), ``scan`` (canary and
  n-gram leak detection), ``advisories`` (known isolation defects), ``verdict`` (results, exit codes);
* the checks: ``cache_sharing``, ``admission`` (I3 from outside), ``leak`` (I1/I2 from outside),
  ``fingerprint`` (the ``engine`` check);
* output: ``plots``, ``report`` (JSON, Markdown, HTML), ``questionnaire``; ``cli`` wires it up.
"""

from kvfence.audit.verdict import CheckResult, Evidence, Verdict

__all__ = ["CheckResult", "Evidence", "Verdict"]
