"""Checkpoints: one ``.npz`` with weights, optimizer state, config, vocabulary and RNG state.

Written atomically (a temporary file in the same folder, fsync, then ``os.replace``), so a crash
never leaves a half-written checkpoint under the real name; read with ``allow_pickle=False``:
every entry is a numeric array or a unicode string array (the config and metadata as JSON).
A checkpoint whose weights hold NaN or infinity is neither written nor loaded.

A run folder has one writer at a time: :func:`run_lock` keeps the writer's pid in ``<folder>/run.lock``
(a lock left by a dead process is taken over, and so are the ``.tmp-PID`` files of its killed writes).
"""
import contextlib
import glob
import json
import os
import signal
import threading
import zipfile

from . import backend
from .backend import xp
from .data.vocab import Vocab
from .errors import CheckpointError, RunLockedError
from .model import Config, init_params

LOCK_NAME = "run.lock"
MODEL_FILES = ("best.npz", "last.npz", "done.json")   # what a training folder holds once it has saved
_held = {}   # absolute folder -> how many nested run_lock() calls of this process hold it


def _non_finite(arrays):
    """Name of the first float array holding NaN or infinity, else None."""
    for k, v in arrays.items():
        a = backend.to_device(v)
        if a.dtype.kind == "f" and not bool(xp.isfinite(a).all()):
            return k
    return None


def pid_alive(pid):
    """True when process ``pid`` exists and is not a zombie (a killed child its parent has not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _lock_owner(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def lock_holder(folder):
    """The pid of another live process holding ``folder``'s run lock, else None."""
    owner = _lock_owner(os.path.join(folder, LOCK_NAME))
    return owner if owner is not None and owner != os.getpid() and pid_alive(owner) else None


def remove_stale_temporaries(folder):
    """Delete ``*.tmp-PID`` files (interrupted atomic writes) in ``folder`` whose writer ``PID`` is dead."""
    for tmp in glob.glob(os.path.join(glob.escape(folder), "*.tmp-*")) + \
            glob.glob(os.path.join(glob.escape(folder), ".*.tmp-*")):
        pid = tmp.rsplit(".tmp-", 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                os.remove(tmp)


@contextlib.contextmanager
def run_lock(folder):
    """Hold ``folder`` (created if needed) for this process while the block runs: ``folder/run.lock`` holds
    our pid and is removed on exit. Another live process's lock raises RunLockedError naming the folder and
    the pid; a lock whose pid is dead (or unreadable) is stale and taken over. Nested calls of one process on
    one folder share the lock. A folder created here and left empty is removed on exit."""
    key = os.path.abspath(folder)
    if _held.get(key):
        _held[key] += 1
        try:
            yield key
        finally:
            _held[key] -= 1
        return
    created = not os.path.exists(key)
    os.makedirs(key, exist_ok=True)
    path = os.path.join(key, LOCK_NAME)
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _lock_owner(path)
            if owner is not None and owner != os.getpid() and pid_alive(owner):
                raise RunLockedError(f"{folder}: another run (pid {owner}) is writing to this folder; wait for "
                                     f"it to end or choose another folder (lock file {path}; if no minihead run "
                                     f"is going, pid {owner} is another program's: delete the lock file)") from None
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)   # stale: its owner is dead
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        break
    else:
        raise RunLockedError(f"{folder}: could not take the lock file {path}")
    _held[key] = 1
    remove_stale_temporaries(key)
    try:
        yield key
    finally:
        del _held[key]
        if _lock_owner(path) == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(key)     # a folder made for a run that wrote nothing goes again (rmdir: only if empty)

FORMAT = "minihead-checkpoint-1"


def save(path, params, cfg, vocab, optimizer=None, rng=None, meta=None, extra=None):
    """Save atomically. ``meta`` is any JSON-able dict (step, epoch, history, training config);
    ``extra`` a dict of additional named arrays (e.g. gate log_alphas). Refuses (CheckpointError, nothing
    written) when a parameter or extra array holds NaN or infinity."""
    bad = _non_finite({**{f"parameter {k!r}": v for k, v in params.items()},
                       **{f"entry {k!r}": v for k, v in (extra or {}).items()}})
    if bad is not None:
        raise CheckpointError(f"{path}: not saved: {bad} holds NaN or infinity")
    arrays = {"format": backend.host_array(FORMAT),
              "config": backend.host_array(json.dumps(cfg.to_dict(), sort_keys=True)),
              "meta": backend.host_array(json.dumps(meta or {}, sort_keys=True)),
              "vocab.itos": backend.host_array(vocab.itos, dtype=str),
              "vocab.counts": backend.host_array(vocab.counts, dtype="int64")}
    arrays.update({f"param.{k}": v for k, v in params.items()})
    if optimizer is not None:
        arrays.update(optimizer.state_arrays())
    if rng is not None:
        arrays["rng"] = backend.host_array(json.dumps(backend.rng_state(rng)))
    for k, v in (extra or {}).items():
        arrays[f"extra.{k}"] = v
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    remove_stale_temporaries(folder)
    return _write_atomically(path, "wb", lambda f: backend.save_npz(f, arrays))


@contextlib.contextmanager
def _signals_held(signums=(signal.SIGINT, signal.SIGTERM)):
    """Hold SIGINT and SIGTERM while the block runs, then deliver them to the handlers they had: an interrupt that
    lands inside a writer (numpy's zip writer) would otherwise break the writer's own clean-up and end the command
    with a traceback instead of its one line saying where to resume. Only in the main thread, where Python runs
    signal handlers; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got = []
    old = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in signums}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    for s in got[:1]:                      # one delivery, to the handler the signal had before
        if callable(old[s]):
            old[s](s, None)
        else:                              # the default action (or ignored): the signal again, now unheld
            os.kill(os.getpid(), s)


def _write_atomically(path, mode, write):
    """``write(f)`` into a temporary file beside ``path``, fsync, then ``os.replace``: a reader sees the old file
    or the new one, never half of one; the temporary is removed if anything fails. Ctrl-C (and SIGTERM) during the
    write is held until the file is in place (:func:`_signals_held`)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    with _signals_held():
        try:
            with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return path


def plain(obj):
    """``obj`` as it reads back from JSON (tuples as lists, keys as strings, numpy floats as floats): a result
    computed now equals the same result read from a file, so a cached and a fresh run compare equal."""
    return json.loads(json.dumps(obj))


def save_json(path, obj):
    """Write a JSON file atomically (temporary file, fsync, ``os.replace``), like :func:`save`."""
    return _write_atomically(path, "w", lambda f: json.dump(obj, f))


def load_json(path):
    """Read a JSON file written by :func:`save_json`; an unreadable one raises CheckpointError naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cache file does not parse ({exc}); delete it to rebuild it") from None


class Checkpoint:
    """A loaded checkpoint: ``params`` (device arrays), ``cfg``, ``vocab``, ``meta``, ``arrays`` (raw)."""

    def __init__(self, path, arrays, cfg, vocab, meta, params):
        self.path, self.arrays, self.cfg, self.vocab, self.meta, self.params = \
            path, arrays, cfg, vocab, meta, params

    def restore_optimizer(self, optimizer):
        try:
            optimizer.load_state_arrays(self.arrays)
        except KeyError as exc:
            raise CheckpointError(f"{self.path}: no optimizer state {exc} (saved without it?)") from None

    def restore_rng(self, gen):
        if "rng" not in self.arrays:
            raise CheckpointError(f"{self.path}: no RNG state saved")
        backend.set_rng_state(gen, json.loads(str(self.arrays["rng"])))

    def extra(self, name):
        key = f"extra.{name}"
        if key not in self.arrays:
            raise CheckpointError(f"{self.path}: no entry {name!r}")
        return backend.to_device(self.arrays[key])


def load(path, expect_cfg=None, expect_vocab=None, expect_train=None):
    """Load a checkpoint; a missing, corrupt or mismatched file raises CheckpointError naming it.

    ``expect_cfg`` (a model Config), ``expect_vocab`` (a Vocab: the same words at the same ids, not only as many)
    and ``expect_train`` (the training settings as ``TrainConfig.to_dict()`` gives them, compared with the ones
    saved in the metadata) make a checkpoint of another model, another vocabulary or another training (a run
    folder copied from another seed, say) an error rather than a model used in their place."""
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: no such checkpoint file" if not os.path.isdir(path) else
                              f"{path}: is a folder, expected a checkpoint file (.npz)")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a readable .npz checkpoint (not a zip archive)")
    try:
        arrays = backend.load_npz(path)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise CheckpointError(f"{path}: not a readable .npz checkpoint ({exc})") from None
    fmt = str(arrays.get("format", ""))
    if fmt != FORMAT:
        raise CheckpointError(f"{path}: format {fmt or 'missing'!r}, expected {FORMAT!r}")
    for key in ("config", "meta", "vocab.itos", "vocab.counts"):
        if key not in arrays:
            raise CheckpointError(f"{path}: entry {key!r} missing")
    try:
        cfg = Config.from_dict(json.loads(str(arrays["config"])))
        meta = json.loads(str(arrays["meta"]))
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{path}: config or metadata does not parse ({exc})") from None
    if expect_cfg is not None and expect_cfg.to_dict() != cfg.to_dict():
        diff = {k: (v, cfg.to_dict()[k]) for k, v in expect_cfg.to_dict().items() if cfg.to_dict()[k] != v}
        raise CheckpointError(f"{path}: config does not match (expected, found): {diff}")
    vocab = Vocab.from_arrays(arrays["vocab.itos"], arrays["vocab.counts"])
    if len(vocab) != cfg.vocab_size:
        raise CheckpointError(f"{path}: vocabulary has {len(vocab)} tokens, config says {cfg.vocab_size}")
    if expect_vocab is not None:
        problem = vocab_difference(vocab, expect_vocab)
        if problem:
            raise CheckpointError(f"{path}: trained on another vocabulary than the data's: {problem}")
    if expect_train is not None:
        saved = meta.get("train") or {}
        diff = [f"{k} {saved.get(k)!r} (saved) vs {expect_train.get(k)!r} (asked)"
                for k in sorted(set(saved) | set(expect_train)) if saved.get(k) != expect_train.get(k)]
        if diff:
            raise CheckpointError(f"{path}: trained with other settings than asked: {', '.join(diff)}")
    shapes = {k: v.shape for k, v in init_params(cfg, 0).items()}
    params = {}
    for k, shape in shapes.items():
        a = arrays.get(f"param.{k}")
        if a is None:
            raise CheckpointError(f"{path}: parameter {k!r} missing")
        if a.shape != shape:
            raise CheckpointError(f"{path}: parameter {k!r} has shape {a.shape}, model expects {shape}")
        params[k] = backend.to_device(a, cfg.dtype)
        if not bool(xp.isfinite(params[k]).all()):
            raise CheckpointError(f"{path}: parameter {k!r} holds NaN or infinity (a diverged training?)")
    return Checkpoint(path, arrays, cfg, vocab, meta, params)


def vocab_difference(saved, now):
    """'' when the two vocabularies name the same words at the same ids, else one line saying how they differ
    (sizes, how many ids name other words, the first such id)."""
    if list(saved.itos) == list(now.itos):
        return ""
    if len(saved) != len(now):
        return f"{len(saved)} tokens saved, {len(now)} in the data"
    diff = [i for i, (a, b) in enumerate(zip(saved.itos, now.itos)) if a != b]
    i = diff[0]
    return (f"{len(diff)} of {len(now)} ids name other words (first: id {i} is {saved.itos[i]!r} saved, "
            f"{now.itos[i]!r} in the data)")
