"""The one place the array module is chosen.

Every other module of the package writes ``from .backend import xp`` and does its array math with
``xp.*``; ``xp`` forwards to NumPy (the default) or CuPy, chosen once by the environment variable
``MINIHEAD_BACKEND`` (``numpy`` or ``cupy``) or by calling :func:`use` before any arrays are made.
Nothing switches silently: asking for CuPy where it is missing, or where no GPU is visible, raises.

Random numbers are always drawn on the host with a seeded ``numpy.random.Generator`` (see :func:`rng`)
and moved to the device, so the same seed gives the same numbers on either backend.
"""
import contextlib
import os

import numpy as _np

from .errors import MiniheadError

FLOAT_TRAIN = "float32"   # dtype for training and inference
FLOAT_CHECK = "float64"   # dtype for gradient checks and LRP conservation tests
BACKENDS = ("numpy", "cupy")


class BackendError(MiniheadError, RuntimeError):
    """An unknown backend was asked for, or CuPy cannot run here."""


class _XP:
    """Forwards attribute access to the active array module (numpy or cupy)."""

    module = _np

    def __getattr__(self, name):
        return getattr(self.module, name)

    def __repr__(self):
        return f"<minihead xp -> {self.module.__name__}>"


xp = _XP()
name = "numpy"


def _load_cupy():
    try:
        import cupy   # optional: only with MINIHEAD_BACKEND=cupy on a machine with a GPU
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise BackendError(
            "MINIHEAD_BACKEND=cupy was asked for but CuPy is not installed "
            "(pip install cupy-cuda12x on a machine with an NVIDIA GPU)") from exc
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # pragma: no cover - depends on the machine
        raise BackendError(f"CuPy is installed but no CUDA device is usable: {exc}") from exc
    if n < 1:  # pragma: no cover
        raise BackendError("CuPy is installed but no GPU is visible")
    return cupy


def use(backend):
    """Select the array module: ``"numpy"`` or ``"cupy"``. Returns the module."""
    global name
    if backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    xp.module = _np if backend == "numpy" else _load_cupy()
    name = backend
    return xp.module


@contextlib.contextmanager
def swapped(module):
    """Point ``xp`` at another NumPy-compatible module for a while (e.g. autograd.numpy, so the tests and
    the benchmark can differentiate the package's own forward code as an oracle)."""
    old = xp.module
    xp.module = module
    try:
        yield module
    finally:
        xp.module = old


def to_host(a):
    """Return ``a`` as a NumPy array on the host (no copy on the NumPy backend)."""
    if name == "cupy" and not isinstance(a, _np.ndarray) and hasattr(a, "get"):
        return a.get()
    return _np.asarray(a)


def to_device(a, dtype=None):
    """Return ``a`` as an array of the active backend, optionally cast to ``dtype``."""
    return xp.asarray(a, dtype=dtype)


def rng(seed):
    """A seeded host random generator (PCG64); draws are moved to the device by the caller."""
    return _np.random.default_rng(seed)


def rng_state(gen):
    """The generator's state as a flat dict of strings, so checkpoints need no pickle."""
    st = gen.bit_generator.state
    return {"state": str(st["state"]["state"]), "inc": str(st["state"]["inc"]),
            "has_uint32": str(st["has_uint32"]), "uinteger": str(st["uinteger"])}


def set_rng_state(gen, flat):
    """Inverse of :func:`rng_state`."""
    gen.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": int(flat["state"]), "inc": int(flat["inc"])},
        "has_uint32": int(flat["has_uint32"]), "uinteger": int(flat["uinteger"])}


def scatter_add(target, index, values):
    """``target[index] += values`` with repeated indices accumulated (embedding gradients)."""
    (xp.module if name == "cupy" else _np).add.at(target, index, values)   # CuPy's is atomic adds on the GPU
    return target


def save_npz(fileobj, arrays):
    """Write a dict of arrays (moved to the host) to an open binary file as an uncompressed .npz."""
    _np.savez(fileobj, **{k: to_host(v) for k, v in arrays.items()})


def load_npz(path):
    """Read an .npz into a dict of host arrays, never unpickling (``allow_pickle=False``)."""
    with _np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def host_array(values, dtype=None):
    """A host (NumPy) array of plain values: strings, ints, for checkpoint metadata."""
    return _np.asarray(values, dtype=dtype)


def _use_environment():
    """The import-time choice; its error names the variable, and ``python -m minihead`` prints it as one line."""
    asked = os.environ.get("MINIHEAD_BACKEND", "numpy")
    try:
        use(asked.strip().lower() or "numpy")
    except BackendError as exc:
        msg = str(exc) if str(exc).startswith("MINIHEAD_BACKEND") else f"MINIHEAD_BACKEND={asked}: {exc}"
        raise BackendError(msg) from None


_use_environment()
