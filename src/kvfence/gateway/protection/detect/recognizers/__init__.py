"""The detection rules, one kind per module (pure: regexes and checks, no I/O).

- ``pii.py``: contact details, payment data, network identifiers, national IDs;
- ``secrets.py``: provider keys and tokens, private keys, passwords in URLs and assignments;
- ``address.py``, ``dob.py``, ``obfuscated_email.py``: postal addresses, dates of birth, spelled-out e-mails;
- ``validators.py``, ``phone_checks.py``, ``id_checks.py``: checksums and structural checks that turn a
  regex candidate into a finding.
"""
