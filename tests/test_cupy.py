"""The CuPy backend against the NumPy one, on a GPU (every test is skipped where CuPy or a GPU is missing).

Two kinds of check. (1) Each fused kernel of :mod:`minihead.kernels` against its NumPy twin, the readable
expression of :mod:`minihead.layers` / :mod:`minihead.optim`, run on the same device arrays with the kernels off.
(2) The whole model in float64 on the same seed: loss, every parameter and gate gradient, LRP head relevance,
greedy output and a few training steps (dropout, clipping, Adam) on CuPy, fused and unfused, against NumPy.
Run it on a GPU machine: ``python -m pytest tests/test_cupy.py``.
"""
from types import SimpleNamespace

import numpy as np
import pytest

from minihead import backend, kernels, layers, lrp, model, optim, translate

cupy = pytest.importorskip("cupy")
try:
    if cupy.cuda.runtime.getDeviceCount() < 1:
        pytest.skip("no GPU visible", allow_module_level=True)
except Exception as exc:  # pragma: no cover - depends on the machine
    pytest.skip(f"no usable GPU: {exc}", allow_module_level=True)


@pytest.fixture
def on_gpu():
    """The CuPy backend with the fused kernels on, for one test; numpy again afterwards."""
    backend.use("cupy")
    try:
        with kernels.switched(True):
            yield
    finally:
        backend.use("numpy")


def unfused():
    """The kernels off for a while: the NumPy expressions run on the device arrays (the twins)."""
    return kernels.switched(False)


def h(a):
    return backend.to_host(a)


def close(a, b, dtype, scale=1.0):
    tol = 1e-12 if np.dtype(dtype) == np.float64 else 2e-5
    np.testing.assert_allclose(h(a), h(b), rtol=tol, atol=tol * scale)


DTYPES = ["float32", "float64"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_kernel_matches_twin(on_gpu, dtype):
    """p = softmax(s + bias) over the last axis and ds = p (dp - sum_k dp_k p_k): kernel = NumPy twin, rows of
    7 (shorter than a warp) and of 45 (longer), a key mask of NEG_INF included."""
    gen = np.random.default_rng(0)
    for K in (7, 45):
        s = cupy.asarray(gen.standard_normal((3, 2, 5, K)), dtype=dtype)
        keep = gen.random((3, 1, 1, K)) > 0.3
        keep[..., 0] = True
        bias = cupy.asarray(np.where(keep, 0.0, layers.NEG_INF), dtype=dtype)
        dp = cupy.asarray(gen.standard_normal(s.shape), dtype=dtype)
        p, _ = layers.softmax_forward(s.copy(), bias, inplace=True)
        ds = layers.softmax_backward(dp, p)
        with unfused():
            p0, _ = layers.softmax_forward(s.copy(), bias)
            ds0 = layers.softmax_backward(dp, p0)
        close(p, p0, dtype)
        close(ds, ds0, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_kernels_match_twin(on_gpu, dtype):
    """y = g (x - mean) / sqrt(var + eps) + b with its cache (x - mean, xhat, rstd), and dx, dg, db of the
    backward: kernel = NumPy twin at widths 24 and 130 (not multiples of a warp), in place and not."""
    gen = np.random.default_rng(1)
    for d in (24, 130):
        x = cupy.asarray(gen.standard_normal((4, 6, d)) * 3 + 1, dtype=dtype)
        g = cupy.asarray(gen.standard_normal(d), dtype=dtype)
        b = cupy.asarray(gen.standard_normal(d), dtype=dtype)
        dy = cupy.asarray(gen.standard_normal(x.shape), dtype=dtype)
        y, c = layers.layernorm_forward(x, g, b, 1e-6)
        dx, dg, db = layers.layernorm_backward(dy.copy(), c, inplace=True)
        with unfused():
            y0, c0 = layers.layernorm_forward(x, g, b, 1e-6)
            dx0, dg0, db0 = layers.layernorm_backward(dy.copy(), c0)
        for a, a0 in zip((y, dx, dg, db) + c[:3], (y0, dx0, dg0, db0) + c0[:3]):
            close(a, a0, dtype, scale=10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_kernels_match_twin(on_gpu, dtype):
    """Label-smoothed cross-entropy (loss, nll sum) and dlogits = m (softmax - q) / sum m: kernel = NumPy twin,
    with padded positions and a vocabulary far wider than a warp."""
    gen = np.random.default_rng(2)
    N, V = 37, 1003
    logits = cupy.asarray(gen.standard_normal((N, V)) * 4, dtype=dtype)
    tgt = cupy.asarray(gen.integers(0, V, N))
    mask = cupy.asarray(gen.random(N) > 0.2)
    loss, nll, c = layers.xent_forward(logits.copy(), tgt, mask, 0.1, inplace=True)
    d = layers.xent_backward(c, inplace=True)
    with unfused():
        loss0, nll0, c0 = layers.xent_forward(logits.copy(), tgt, mask, 0.1)
        d0 = layers.xent_backward(c0)
    close(loss, loss0, dtype)
    close(nll, nll0, dtype, scale=100)
    close(d, d0, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_flat_adam_and_clipping_match_the_loop(on_gpu, dtype):
    """Adam over one flat buffer (one launch) = the per-array loop of optim.Adam.step, after three steps with
    clipping by global norm; the parameters are views of the buffer and the checkpoint arrays read the same."""
    gen = np.random.default_rng(3)
    shapes = {"a": (3, 4), "b": (5,), "c": (2, 3, 2)}
    start = {k: gen.standard_normal(s) for k, s in shapes.items()}
    grads = [{k: gen.standard_normal(s) * 5 for k, s in shapes.items()} for _ in range(3)]
    out = {}
    for fused in (True, False):
        kernels.FUSED = fused
        params = {k: cupy.asarray(v, dtype=dtype) for k, v in start.items()}
        opt = optim.Adam(params)
        assert (opt.flat is not None) == fused
        for g in grads:
            gd = {k: cupy.asarray(v, dtype=dtype) for k, v in g.items()}
            norm = optim.clip_grad_norm(gd, 1.0)
            opt.step(params, gd, 0.01)
        out[fused] = ({k: h(v) for k, v in params.items()}, {k: h(v) for k, v in opt.state_arrays().items()}, norm)
    for k in shapes:
        close(out[True][0][k], out[False][0][k], dtype)
    for k in out[False][1]:
        close(out[True][1][k], out[False][1][k], dtype, scale=10)
    assert out[True][2] == pytest.approx(out[False][2], rel=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_dropout_is_the_host_mask_bit_for_bit(on_gpu, dtype):
    """The dropout mask drawn on the GPU from the generator's PCG64 stream equals the host draw exactly, for
    sizes that do and do not fill the last 64-bit draw, and leaves the generator in the same state."""
    for shape in ((7,), (3, 5, 11), (96, 15, 512)):
        g_dev, g_host = backend.rng(5), backend.rng(5)
        g_dev.random(3), g_host.random(3)
        m = layers.dropout_mask(shape, 0.1, g_dev, dtype)
        with unfused():
            m0 = layers.dropout_mask(shape, 0.1, g_host, dtype)
        assert np.array_equal(h(m), h(m0))
        assert g_dev.bit_generator.state == g_host.bit_generator.state


def _problem(seed=0):
    cfg = model.Config(vocab_size=23, n_enc_layers=2, n_dec_layers=2, n_heads=2, d_model=16, d_ff=24,
                       dropout=0.0, dtype="float64")
    params = {k: h(v) for k, v in model.init_params(cfg, seed).items()}
    gen = np.random.default_rng(seed)
    src_mask = np.ones((3, 5), bool)
    src_mask[1, 3:] = False
    tgt_mask = np.ones((3, 6), bool)
    tgt_mask[2, 4:] = False
    batch = dict(src=gen.integers(4, 23, (3, 5)), src_mask=src_mask, tgt_in=gen.integers(4, 23, (3, 6)),
                 tgt_out=gen.integers(4, 23, (3, 6)), tgt_mask=tgt_mask, n_tokens=int(tgt_mask.sum()))
    gates = {k: gen.uniform(0.2, 1.0, (2, 2)) for k in model.GATE_KINDS}
    return cfg, params, batch, gates


def _on_device(params, batch, gates):
    dev = backend.to_device
    return ({k: dev(v.copy()) for k, v in params.items()},          # a copy: on NumPy to_device is the array itself
            SimpleNamespace(**{k: (dev(v) if isinstance(v, np.ndarray) else v) for k, v in batch.items()}),
            {k: dev(v) for k, v in gates.items()})


def _numpy_reference(fn):
    backend.use("numpy")
    try:
        return fn()
    finally:
        backend.use("cupy")


@pytest.mark.parametrize("fused", [True, False])
def test_loss_and_every_gradient_match_numpy_in_float64(on_gpu, fused):
    """loss = label-smoothed cross-entropy, dL/dtheta for every parameter and dL/dg for the gates on every
    attention type: CuPy (fused and unfused) = NumPy to 1e-12 of each array's scale, in float64. A gradient that
    is zero in exact arithmetic (dL/db^K: softmax is blind to a shift shared by every key) is roundoff on both
    sides, so 1e-15 of the model's largest gradient is allowed beside the relative 1e-12."""
    cfg, params, batch, gates = _problem()

    def run():
        p, b, g = _on_device(params, batch, gates)
        loss, grads, info = model.loss_and_grads(p, cfg, b, gates=g)
        return h(loss), {k: h(v) for k, v in grads.items()}, {k: h(v) for k, v in info["dgates"].items()}
    ref = _numpy_reference(run)
    kernels.FUSED = fused
    got = run()
    assert abs(got[0] - ref[0]) <= 1e-12 * abs(ref[0])
    for grads, grads0 in ((got[1], ref[1]), (got[2], ref[2])):
        largest = max(np.abs(v).max() for v in grads0.values())
        for k in grads0:
            assert np.abs(grads[k] - grads0[k]).max() <= 1e-12 * np.abs(grads0[k]).max() + 1e-15 * largest, k


def test_lrp_head_relevance_matches_numpy_in_float64(on_gpu):
    """LRP head relevance (z-rule, gated heads) and the source relevance: CuPy = NumPy to 1e-10, float64."""
    cfg, params, batch, gates = _problem(1)

    def run():
        p, b, g = _on_device(params, batch, gates)
        r = lrp.relevance(p, cfg, b, gates=g)
        return {k: [h(x) for x in v] for k, v in r.head.items()}, h(r.src)
    ref = _numpy_reference(run)
    got = run()
    for k in ref[0]:
        for a, a0 in zip(got[0][k], ref[0][k]):
            np.testing.assert_allclose(a, a0, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-10, atol=1e-12)


def test_greedy_output_matches_numpy(on_gpu):
    """Greedy decoding of the same model and batch gives the same token ids on both backends."""
    cfg, params, batch, gates = _problem(2)

    def run():
        p, b, _ = _on_device(params, batch, gates)
        return [list(map(int, row)) for row in h(translate.greedy_batch(p, cfg, b, max_len=8))]
    assert run() == _numpy_reference(run)


def test_training_steps_with_dropout_match_numpy_in_float64(on_gpu):
    """Three training steps with dropout 0.1, clipping and Adam (flat on the GPU): the parameters after them
    equal NumPy's to 1e-10 of each array's scale (the key biases aside: their gradient is zero in exact
    arithmetic), and the dropout generator ends in the same state."""
    cfg, params, batch, gates = _problem(3)
    cfg.dropout = 0.1

    def run():
        p, b, _ = _on_device(params, batch, gates)
        opt, gen = optim.Adam(p), backend.rng(11)
        for _ in range(3):
            _, grads, _ = model.loss_and_grads(p, cfg, b, rng=gen)
            optim.clip_grad_norm(grads, 0.5)
            opt.step(p, grads, 1e-3)
        return {k: h(v) for k, v in p.items()}, gen.bit_generator.state
    ref = _numpy_reference(run)
    got = run()
    assert got[1] == ref[1]
    for k in ref[0]:
        if k.endswith(".bk"):   # dL/db^K is roundoff on both sides, and Adam's normalised step turns roundoff
            continue            # into steps of up to lr; it moves no output (the gradient test compares it)
        assert np.abs(got[0][k] - ref[0][k]).max() <= 1e-10 * np.abs(ref[0][k]).max(), k
