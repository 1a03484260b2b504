"""The stage cache: one JSON file per computed stage, keyed by everything the result depends on.

Every stage of ``python -m minihead reproduce`` (importance, baseline BLEU, each pruning run, each from-scratch
training) and of ``python -m minihead emergence`` (the measurement of one seed's model) is stored as
``{"key": key, "result": result}`` in a file of the run folder it belongs to. :func:`cached_json` reads the file
when its key equals the caller's (the model's fingerprint, the settings, the version of the computation) and
computes, writes and returns the result otherwise; so an interrupted study resumes at the first missing stage,
and a changed setting is recomputed, never silently reused. Writes are atomic (temporary file beside the target,
fsync, ``os.replace``: :func:`minihead.checkpoint._write_atomically`), so a killed run leaves the old file or the
new one, never half of one.
"""
import hashlib
import json
import os

from .checkpoint import _write_atomically
from .errors import MiniheadError


class CacheError(MiniheadError, ValueError):
    """A cache file exists but cannot be read as one (not JSON, or not a ``{"key", "result"}`` object)."""


def key_hash(key):
    """Ten hex digits of the SHA-1 of ``key`` as sorted JSON: the part of a cache file's name that changes with
    its key, so results under different settings sit side by side."""
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]


def cached_json(path, key, compute):
    """Read ``path`` if it holds a result for exactly ``key``, else call ``compute()`` (a JSON-able dict), write
    ``{"key": key, "result": result}`` atomically and return the result. The returned dict carries ``cached``
    (True when read from disk). A file that does not parse is a :class:`CacheError` naming it (one line, never a
    silent recompute: deleting it is the user's choice)."""
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise CacheError(f"{path}: cache file does not parse ({exc}); delete it to recompute") from None
        if not (isinstance(data, dict) and isinstance(data.get("result"), dict)):
            raise CacheError(f"{path}: cache file holds no {{key, result}} object; delete it to recompute")
        if data.get("key") == key:
            return {**data["result"], "cached": True}
    result = compute()
    _write_atomically(path, "w", lambda f: json.dump({"key": key, "result": result}, f, indent=1, sort_keys=True))
    return {**result, "cached": False}

