"""Shared error types, so callers can catch minihead's own complaints apart from bugs.

``DataError`` is also a ``ValueError``: bad input is a bad value, and code that already catches
``ValueError`` keeps working. Messages name the file, the line and the problem
(``"dev.conllu:17: HEAD 9 out of range 0..8"``).
"""


class MiniheadError(Exception):
    """Base class of every error minihead raises on purpose."""


class DataError(MiniheadError, ValueError):
    """Input data (text, CoNLL-U, vocabulary) is malformed or inconsistent."""


class CheckpointError(MiniheadError):
    """A checkpoint file is missing, truncated or does not fit the model it is loaded into."""
