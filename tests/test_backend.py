"""The backend switch: one array module, chosen explicitly, never silently."""
import ast
import os
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from minihead import backend, model

PKG = pathlib.Path(__file__).resolve().parents[1] / "minihead"


def test_no_module_but_backend_imports_numpy_or_cupy():
    """Array math goes through ``minihead.backend.xp`` only: no other package module imports numpy/cupy."""
    offenders = []
    for path in PKG.rglob("*.py"):
        if path.name == "backend.py" and path.parent == PKG:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in ("numpy", "cupy", "cupyx"):
                    offenders.append(f"{path.relative_to(PKG.parent)}:{node.lineno}: import {n}")
    assert not offenders, "\n".join(offenders)


def test_unknown_backend_is_a_clear_error():
    """backend.use('tpu') raises BackendError naming the unknown backend and leaves numpy in place."""
    with pytest.raises(backend.BackendError, match="unknown backend 'tpu'"):
        backend.use("tpu")
    assert backend.name == "numpy"


def test_unknown_backend_from_environment_fails_at_import():
    """MINIHEAD_BACKEND=jax makes importing minihead.backend fail with 'unknown backend', rather
    than falling back silently."""
    env = dict(os.environ, MINIHEAD_BACKEND="jax", PYTHONPATH=str(PKG.parent))
    r = subprocess.run([sys.executable, "-c", "import minihead.backend"], env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "unknown backend 'jax'" in r.stderr


def test_cupy_request_without_cupy_or_gpu_is_a_clear_error():
    """Asking for CuPy where it is not installed raises BackendError 'CuPy is not installed' and keeps
    numpy as the array module (skipped where CuPy is installed)."""
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here; the error path is for machines without it")
    except ImportError:
        pass
    with pytest.raises(backend.BackendError, match="CuPy is not installed"):
        backend.use("cupy")
    assert backend.name == "numpy" and backend.xp.module is np, "a failed switch leaves numpy in place"


def test_host_device_round_trip_and_rng_state():
    """to_device makes the dtype asked for and to_host gives a NumPy array back; a host generator's state is
    plain strings (checkpointable without pickle) and restoring it into another generator replays the
    same numbers."""
    a = backend.to_device([1.0, 2.0], "float32")
    assert a.dtype == np.float32 and isinstance(backend.to_host(a), np.ndarray)
    g = backend.rng(3)
    g.random(5)
    st = backend.rng_state(g)
    assert all(isinstance(v, str) for v in st.values()), "checkpointable without pickle"
    x = g.random(4)
    g2 = backend.rng(99)
    backend.set_rng_state(g2, st)
    assert np.array_equal(g2.random(4), x)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_model_keeps_its_dtype(dtype):
    """float32 for training, float64 for checks: no silent up-casting anywhere in forward or backward."""
    cfg = model.Config(vocab_size=15, n_enc_layers=1, n_dec_layers=1, n_heads=2, d_model=8, d_ff=8, dtype=dtype)
    params = model.init_params(cfg, 0)
    assert all(v.dtype == np.dtype(dtype) for v in params.values())
    gen = np.random.default_rng(0)
    b = SimpleNamespace(src=gen.integers(4, 15, (2, 3)), src_mask=np.ones((2, 3), bool),
                        tgt_in=gen.integers(4, 15, (2, 4)), tgt_out=gen.integers(4, 15, (2, 4)),
                        tgt_mask=np.ones((2, 4), bool))
    gates = {k: np.ones((1, 2), dtype) for k in model.GATE_KINDS}
    loss, grads, info = model.loss_and_grads(params, cfg, b, gates, backend.rng(0))
    assert all(g.dtype == np.dtype(dtype) for g in grads.values())
    assert info["cache"]["enc"]["layers"][0]["self"]["f"]["A"].dtype == np.dtype(dtype)
