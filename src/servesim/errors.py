"""User-facing errors: each names the file, line or field, what was found and what was expected.

The CLI prints ``str(err)`` on one line (or a few) and exits non-zero without a traceback.
Anything that is not a ``ServesimError`` is a bug and keeps its traceback.
"""

from collections.abc import Iterator
from contextlib import contextmanager


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


#: The errors of a scenario's inputs, which ``naming_file`` prefixes with the scenario file.
_OF_INPUTS = (ConfigError, WorkloadError, CatalogError, DoesNotFitError)


@contextmanager
def naming_file(path: str | None) -> Iterator[None]:
    """Errors of a scenario's inputs found after its file was read and validated (an unknown
    GPU, a max_model_len above the model's, a workload no arrival falls in, a model that
    does not fit) name the scenario file first, as its validation errors do; a message that
    names the file already, or a run without one (``path`` None), is left as it is."""
    try:
        yield
    except _OF_INPUTS as err:
        text = str(err)
        if path is None or path in text:
            raise
        raise type(err)(f"{path}: {text}") from None
