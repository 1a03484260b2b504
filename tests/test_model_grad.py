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
