"""User-facing errors: each names the file, line or field, what was found and what was expected.

The CLI prints ``str(err)`` on one line (or a few) and exits non-zero without a traceback.
Anything that is not a ``ServesimError`` is a bug and keeps its traceback.
"""


class ServesimError(Exception):
    """Base class of errors caused by the user's input, not by servesim."""


class ConfigError(ServesimError):
    """A scenario file or override is invalid."""


class WorkloadError(ServesimError):
    """A trace file is missing or malformed (the message names file and line)."""


class CatalogError(ServesimError):
    """An unknown model/GPU name or an unreadable config.json."""


class DoesNotFitError(ServesimError):
    """The model (or its KV cache for one max-length request) does not fit in memory."""
