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


class UsageError(MiniheadError, ValueError):
    """A command-line argument or setting is of the wrong type, out of range, or names a path that cannot be
    used (missing input, output where a file blocks a folder, a run folder holding another model)."""


class TrainingError(MiniheadError):
    """Training cannot go on: a non-finite loss or gradient (nothing is saved for that step)."""


class RunLockedError(MiniheadError):
    """A run folder is being written by another live process (its pid is in the folder's lock file)."""
