"""The detection rules, one kind per module (pure: regexes and checks, no I/O).

- ``pii.py``: contact details, payment data, network identifiers, national IDs;
- ``secrets.py``: provider keys and tokens, private keys, passwords in URLs and assignments;
- postal addresses: ``address.py`` (US, UK, German, French), ``address_intl.py`` (the other countries and
  every PO box), ``address_jp_in_br.py`` (Japan, India, Brazil), ``address_parts.py`` (the shapes they share,
  and the unit, building, region and country lines around a found address);
- ``dob.py``, ``obfuscated_email.py``: dates of birth, spelled-out e-mails;
- personal names, offline: ``person.py`` (the rules over a text's words), ``person_words.py`` (titles,
  cues, context patterns), ``person_labels.py`` (name fields, list labels), ``csv_names.py`` (CSV name
  columns), ``person_mentions.py`` (one value per person across a request), ``gazetteer.py`` and
  ``data/`` (the name lists), ``not_names.py`` (firms, places, products that look like names);
- ``validators.py``, ``phone_checks.py``, ``id_checks.py``: checksums and structural checks that turn a
  regex candidate into a finding.
"""
