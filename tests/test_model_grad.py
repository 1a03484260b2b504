"""The whole encoder-decoder's loss gradient, the specification of model.backward.

L(theta, g) = label-smoothed cross-entropy of the teacher-forced translation model, with dropout on
under a fixed seed (the same masks in every evaluation), per-head gates g on all three attention
types, and padding on both sides. The hand-written gradient of every parameter and every gate is
checked in float64 against autograd run over the same forward code (the backend's ``xp`` pointed at
autograd.numpy), and against central differences along random directions.
"""
from types import SimpleNamespace

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

from minihead import backend, model
from minihead.gradcheck import directional_grads, rel_error


def toy_batch(gen, V, B=3, S=6, T=5):
    src = gen.integers(4, V, (B, S))
    src_mask = np.ones((B, S), bool)
    src_mask[0, 4:] = False
    src[0, 4:] = 0
    tgt_in = gen.integers(4, V, (B, T))
    tgt_out = gen.integers(4, V, (B, T))
    tgt_mask = np.ones((B, T), bool)
    tgt_mask[2, 3:] = False
    tgt_in[2, 3:] = tgt_out[2, 3:] = 0
    return SimpleNamespace(src=src, src_mask=src_mask, tgt_in=tgt_in, tgt_out=tgt_out, tgt_mask=tgt_mask)


@pytest.mark.parametrize("pre_norm,shared", [(True, True), (False, False)], ids=["prenorm-shared", "postnorm-separate"])
def test_encoder_decoder_backward_parameters_and_gates(pre_norm, shared):
    """dL/dtheta for every parameter and dL/dg for every gate of the encoder-decoder, dropout on (seed 5),
    padding present: rel. error < 1e-6 against autograd, and along 3 random directions against
    (L(theta + eps v) - L(theta - eps v)) / (2 eps)."""
    cfg = model.Config(vocab_size=23, n_enc_layers=2, n_dec_layers=2, n_heads=2, d_model=8, d_ff=12,
                       dropout=0.2, attn_dropout=0.1, label_smoothing=0.1, shared_embeddings=shared,
                       pre_norm=pre_norm, dtype="float64")
    params = model.init_params(cfg, seed=3)
    gen = np.random.default_rng(11)
    for k in params:                            # non-trivial LayerNorm gains and biases
        if k.endswith((".b", ".g", "b1", "b2", ".bq", ".bk", ".bv", ".bo")):
            params[k] = params[k] + gen.normal(0, 0.1, params[k].shape)
    batch = toy_batch(gen, cfg.vocab_size)
    gates = {k: gen.uniform(0.3, 1.0, (2, 2)) for k in model.GATE_KINDS}

    loss, grads, info = model.loss_and_grads(params, cfg, batch, gates, backend.rng(5))
    assert set(grads) == set(params)

    def L(p, g):
        return model.loss_forward(p, cfg, batch, g, backend.rng(5))[0]
    with backend.swapped(anp):
        ag_params, ag_gates = autograd.grad(L, (0, 1))(params, gates)
    for k in params:
        if k.endswith(".bk"):                   # exactly zero in theory (softmax shift invariance)
            assert np.abs(grads[k]).max() < 1e-12, k
            continue
        assert rel_error(grads[k], ag_params[k]) < 1e-6, k
    for k in model.GATE_KINDS:
        assert rel_error(info["dgates"][k], ag_gates[k]) < 1e-6, k

    names = sorted(params)
    xs = [params[k] for k in names] + [gates[k] for k in model.GATE_KINDS]
    gs = [grads[k] for k in names] + [info["dgates"][k] for k in model.GATE_KINDS]
    for num, ana in directional_grads(lambda: L(params, gates), xs, gs, np.random.default_rng(0)):
        assert abs(num - ana) < 1e-6 * max(1.0, abs(ana)), (num, ana)


def test_padding_does_not_change_real_positions():
    """Appending padding to the source leaves the loss unchanged (masks work end to end)."""
    cfg = model.Config(vocab_size=20, n_enc_layers=1, n_dec_layers=1, n_heads=2, d_model=8, d_ff=8,
                       dropout=0.0, dtype="float64")
    params = model.init_params(cfg, 0)
    b = toy_batch(np.random.default_rng(2), 20)
    l1 = model.loss_forward(params, cfg, b)[0]
    b2 = SimpleNamespace(**vars(b))
    b2.src = np.concatenate([b.src, np.zeros((3, 3), int)], 1)
    b2.src_mask = np.concatenate([b.src_mask, np.zeros((3, 3), bool)], 1)
    l2 = model.loss_forward(params, cfg, b2)[0]
    assert abs(l1 - l2) < 1e-12


@pytest.mark.parametrize("with_gates", [True, False], ids=["gates", "no-gates"])
def test_in_place_training_step_equals_the_out_of_place_one(monkeypatch, with_gates):
    """The in-place branches (layers._owned: the forward's, and the backward's that reuse the cross-entropy's
    and LayerNorm's arrays) change no number: loss and every gradient of a float32 training step with dropout
    are bit for bit those of the out-of-place path that autograd checks above."""
    from minihead import layers
    cfg = model.Config(vocab_size=23, n_enc_layers=2, n_dec_layers=2, n_heads=2, d_model=8, d_ff=12,
                       dropout=0.2, attn_dropout=0.1)
    params = model.init_params(cfg, seed=3)
    batch = toy_batch(np.random.default_rng(12), cfg.vocab_size)
    gates = {k: np.full((2, 2), 0.7, "float32") for k in model.GATE_KINDS} if with_gates else None
    loss, grads, info = model.loss_and_grads(params, cfg, batch, gates, backend.rng(5))
    monkeypatch.setattr(layers, "INPLACE", False)
    loss2, grads2, info2 = model.loss_and_grads(params, cfg, batch, gates, backend.rng(5))
    assert loss == loss2 and all(np.array_equal(grads[k], grads2[k]) for k in params)
    if with_gates:
        assert all(np.array_equal(info["dgates"][k], info2["dgates"][k]) for k in model.GATE_KINDS)


def test_adam_and_clipping_follow_their_formulas():
    """Adam (Kingma & Ba 2015, Algorithm 1): m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
    p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), written out for three steps in float64; and
    clip_grad_norm scales every gradient by max_norm / ||g|| when the global norm ||g|| exceeds max_norm."""
    from minihead.optim import Adam, clip_grad_norm
    gen = np.random.default_rng(0)
    params = {"a": gen.normal(size=(3, 4)), "b": gen.normal(size=5)}
    ref = {k: v.copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(x) for k, x in params.items()}
    opt, (b1, b2, eps) = Adam(params), (0.9, 0.98, 1e-9)
    for t in range(1, 4):
        grads = {k: gen.normal(size=x.shape) for k, x in params.items()}
        for k, g in grads.items():
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            ref[k] = ref[k] - 0.01 * (m[k] / (1 - b1 ** t)) / (np.sqrt(v[k] / (1 - b2 ** t)) + eps)
        opt.step(params, grads, 0.01)
        for k in params:
            assert np.allclose(params[k], ref[k], rtol=1e-12, atol=1e-14), (t, k)
    grads = {k: gen.normal(size=x.shape) for k, x in params.items()}
    norm = np.sqrt(sum((g * g).sum() for g in grads.values()))
    before = {k: g.copy() for k, g in grads.items()}
    assert clip_grad_norm(grads, 0.5) == pytest.approx(norm, rel=1e-12)
    assert all(np.allclose(grads[k], before[k] * 0.5 / norm, rtol=1e-9) for k in grads)
