"""Checkpoints: one ``.npz`` with weights, optimizer state, config, vocabulary and RNG state.

Written atomically (a temporary file in the same folder, fsync, then ``os.replace``), so a crash
never leaves a half-written checkpoint under the real name; read with ``allow_pickle=False``:
every entry is a numeric array or a unicode string array (the config and metadata as JSON).
"""
import json
import os
import zipfile

from . import backend
from .errors import CheckpointError

FORMAT = "minihead-checkpoint-1"


def save(path, params, cfg, vocab, optimizer=None, rng=None, meta=None, extra=None):
    """Save atomically. ``meta`` is any JSON-able dict (step, epoch, history, training config);
    ``extra`` a dict of additional named arrays (e.g. gate log_alphas)."""
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
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            backend.save_npz(f, arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


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


def load(path, expect_cfg=None):
    """Load a checkpoint; a missing, corrupt or mismatched file raises CheckpointError naming it."""
    from .data.vocab import Vocab
    from .model import Config, init_params
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: no such checkpoint file")
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
    shapes = {k: v.shape for k, v in init_params(cfg, 0).items()}
    params = {}
    for k, shape in shapes.items():
        a = arrays.get(f"param.{k}")
        if a is None:
            raise CheckpointError(f"{path}: parameter {k!r} missing")
        if a.shape != shape:
            raise CheckpointError(f"{path}: parameter {k!r} has shape {a.shape}, model expects {shape}")
        params[k] = backend.to_device(a, cfg.dtype)
    return Checkpoint(path, arrays, cfg, vocab, meta, params)
