"""The detection rules, one kind per module (pure: regexes and checks, no I/O).

- ``pii.py``: contact details, payment data, network identifiers, national IDs;
- ``secrets.py``: provider keys and tokens, private keys, passwords in URLs and assignments;
- ``address.py``, ``address_intl.py``, ``dob.py``, ``obfuscated_email.py``: postal addresses, dates of
  birth, spelled-out e-mails;
- personal names, offline: ``person.py`` (the rules over a text's words), ``person_words.py`` (titles,
  cues, context patterns), ``person_labels.py`` (name fields, list labels), ``csv_names.py`` (CSV name
  columns), ``person_mentions.py`` (one value per person across a request), ``gazetteer.py`` and
  ``data/`` (the name lists), ``not_names.py`` (firms, places, products that look like names);
- ``validators.py``, ``phone_checks.py``, ``id_checks.py``: checksums and structural checks that turn a
  regex candidate into a finding.
"""
