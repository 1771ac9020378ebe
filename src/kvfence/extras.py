"""Which optional extra of the ``kvfence`` distribution a missing module belongs to.

``pip install kvfence`` (``kvfence[gateway]``) is the gateway and the auditor's HTTP checks; the other parts
come with extras (``engine``, ``disagg``, ``ner``, ``audit``, ``all``). Code that needs an extra's module
imports it where it is used, so the parts that do not need it never load it. When one is missing, the CLI
(``kvfence.cli.main``, the one boundary every command passes) turns the ``ModuleNotFoundError`` into a
:class:`MissingExtraError`: one line naming the extra to install, exit code 2, no traceback.
"""

from __future__ import annotations

from kvfence.errors import ConfigError

__all__ = ["EXTRA_OF_MODULE", "MissingExtraError", "missing_extra"]

# top-level module -> the extra that installs it (pyproject.toml, [project.optional-dependencies])
EXTRA_OF_MODULE: dict[str, str] = {
    "torch": "engine",
    "safetensors": "engine",
    "llguidance": "engine",
    "zmq": "disagg",
    "presidio_analyzer": "ner",
    "spacy": "ner",
    "scipy": "audit",
    "matplotlib": "audit",
}


class MissingExtraError(ConfigError):
    """A command needs a module that only an extra installs."""

    def __init__(self, what: str, extra: str, module: str) -> None:
        super().__init__(f"{what} needs the {extra} extra: pip install 'kvfence[{extra}]' (missing module: {module})")
        self.extra = extra
        self.module = module


def missing_extra(exc: ModuleNotFoundError, what: str) -> MissingExtraError | None:
    """The :class:`MissingExtraError` for ``exc`` when its module belongs to an extra, else ``None``
    (a missing module of the base install is a broken installation, not a missing extra)."""
    top = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    return None if extra is None else MissingExtraError(what, extra, top)
