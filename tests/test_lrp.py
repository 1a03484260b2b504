"""Layer-wise relevance propagation (minihead/lrp.py, minihead/lrp_rules.py), float64.

Each fast (vectorised) rule is checked against its textbook twin in minihead/lrp_reference.py (explicit
Python loops over i and j); LRP-0 on a bias-free ReLU network against gradient x input; conservation layer by
layer on toy encoder-decoders: the paper's z-rule and the official code's variant with RANDOM biases and
LayerNorm betas, the epsilon and alpha-beta families bias-free; the head relevances against the relevance of
their attention sublayer; per-position starts against all-at-once.
"""
import itertools

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from minihead import backend, lrp, lrp_rules, model
from minihead import lrp_reference as ref
from minihead.layers import layernorm_forward, mha_forward
from minihead.lrp_reference import slow_alphabeta, slow_epsilon, toy_batch, toy_model


# ----------------------------------------------------------------------------- rules vs loops

@pytest.mark.parametrize("eps", [0.0, 1e-2])
def test_linear_epsilon_matches_loops(eps):
    """R_i = sum_j x_i w_ij R_j / (z_j + eps sign z_j), z_j = sum_i x_i w_ij + b_j; with an input row of
    zeros and b = 0 (z = 0) the relevance is dropped, not NaN."""
    g = np.random.default_rng(0)
    x, W, b, R = g.normal(size=(4, 5)), g.normal(size=(5, 3)), g.normal(size=3), g.normal(size=(4, 3))
    fast = lrp.linear_epsilon(x, W, b, None, R, eps)
    assert np.allclose(fast, slow_epsilon(x, W, b, R, eps), atol=1e-12)
    x[1] = 0.0
    fast = lrp.linear_epsilon(x, W, 0 * b, None, R, eps)
    assert np.isfinite(fast).all() and np.allclose(fast, slow_epsilon(x, W, 0 * b, R, eps), atol=1e-12)
    # z from the forward pass gives the same as recomputing it
    assert np.allclose(lrp.linear_epsilon(x, W, b, x @ W + b, R, eps), lrp.linear_epsilon(x, W, b, None, R, eps))


@pytest.mark.parametrize("alpha,beta,conv", [(0.5, 0.5, "sum"), (2.0, 1.0, "difference"), (1.0, 0.0, "sum")])
def test_linear_alphabeta_matches_loops(alpha, beta, conv):
    """'sum': R_i = sum_j (a z+_ij / z+_j + b z-_ij / z-_j) R_j; 'difference': ... - b z-_ij / z-_j ...;
    z+_j = sum_i max(x_i w_ij, 0) + max(b_j, 0), z-_j likewise with min."""
    g = np.random.default_rng(1)
    x, W, b, R = g.normal(size=(4, 5)), g.normal(size=(5, 3)), g.normal(size=3), g.normal(size=(4, 3))
    eps = 1e-9
    slow = np.zeros_like(x)
    s = 1.0 if conv == "sum" else -1.0
    for n in range(4):
        for j in range(3):
            zij = [x[n, i] * W[i, j] for i in range(5)]
            zp = sum(max(z, 0) for z in zij) + max(b[j], 0) + eps
            zn = sum(min(z, 0) for z in zij) + min(b[j], 0) - eps
            for i in range(5):
                slow[n, i] += (alpha * max(zij[i], 0) / zp + s * beta * min(zij[i], 0) / zn) * R[n, j]
    fast = lrp.linear_alphabeta(x, W, b, None, R, alpha, beta, conv, eps)
    assert np.allclose(fast, slow, atol=1e-10)
    with pytest.raises(lrp.LRPError, match="convention"):
        lrp.linear_alphabeta(x, W, b, None, R, convention="both")


@pytest.mark.parametrize("fallback", [True, False])
def test_alphabeta_family_matches_loops(fallback):
    """Alpha-beta ('sum', 0.5 / 0.5) for a linear layer with one-signed outputs present, the residual
    split (contributions x, f per element), the LayerNorm map (x_i M_ij, M_ij = rstd g_j (delta_ij - 1/d),
    bias beta) and the value path of attention (A_qk V_kc), each against explicit loops; with the
    fallback a one-signed output hands its whole relevance to the side that exists."""
    g = np.random.default_rng(30)
    eps, kw = 1e-9, dict(alpha=0.5, beta=0.5, convention="sum", fallback=fallback)
    x, W, R = np.abs(g.normal(size=(4, 3))), g.normal(size=(3, 5)), g.normal(size=(4, 5))
    W[:, 0], W[:, 1] = np.abs(W[:, 0]), -np.abs(W[:, 1])    # outputs 0 and 1 are one-signed
    want = slow_alphabeta(x[:, :, None] * W[None], np.zeros((4, 5)), R, 0.5, 0.5, "sum", eps, fallback)
    assert np.allclose(lrp.linear_alphabeta(x, W, None, None, R, eps=eps, fallback=fallback), want)
    if fallback:
        assert np.allclose(want.sum(-1), R.sum(-1))          # conserving despite one-signed outputs
    # residual
    x, f, R = g.normal(size=(3, 4)), g.normal(size=(3, 4)), g.normal(size=(3, 4))
    Rx, Rf = lrp.residual_alphabeta(x, f, R, eps=eps, **kw)
    zc = np.stack([x.reshape(-1), f.reshape(-1)], 1)[:, :, None]           # (12, 2, 1)
    want = slow_alphabeta(zc, np.zeros((12, 1)), R.reshape(-1, 1), 0.5, 0.5, "sum", eps, fallback)
    assert np.allclose(Rx.reshape(-1), want[:, 0]) and np.allclose(Rf.reshape(-1), want[:, 1])
    # layer norm
    d = 5
    x, gain, bb, R = g.normal(size=(3, d)) + 0.5, g.normal(size=d), g.normal(size=d) * 0.1, g.normal(size=(3, d))
    y, c = layernorm_forward(x, gain, bb)
    rstd = c[2]
    M = rstd[:, :, None] * gain[None, None, :] * (np.eye(d) - 1 / d)[None]  # (3, i, j)
    want = slow_alphabeta(x[:, :, None] * M, np.tile(bb, (3, 1)), R, 0.5, 0.5, "sum", eps, fallback)
    assert np.allclose(lrp.layernorm_alphabeta(x, y, rstd, gain, R, bb, eps=eps, **kw), want, atol=1e-10)
    # attention values
    A, Q, K, V, Z, scale, R = _attn_inputs(31)
    _, _, RV = lrp.attention_values_alphabeta(A, Q, K, V, Z, scale, R, eps=eps, **kw)
    B, H, Tq, Tk = A.shape
    for b, h, cc in itertools.product(range(B), range(H), range(V.shape[-1])):
        zc = (V[b, h, :, cc][:, None] * A[b, h].T)[None]                     # (1, k, q)
        want = slow_alphabeta(zc, np.zeros((1, Tq)), R[b, h, :, cc][None], 0.5, 0.5, "sum", eps, fallback)
        assert np.allclose(RV[b, h, :, cc], want[0], atol=1e-10)


def test_linear_z_matches_loops_and_conserves_with_bias():
    """The paper's rule (Ding et al. 2017): R_i = sum_j x_i w_ij R_j / sum_i' x_i' w_i'j, the bias NOT an input,
    against its slow twin; sum_i R_i = sum_j R_j to 1e-12 with a random bias (the epsilon rule with the same
    bias loses its share); the same rule on a batched weight (one (d, 1) matrix per row, the output layer)."""
    g = np.random.default_rng(40)
    x, W, b, R = g.normal(size=(4, 5)), g.normal(size=(5, 3)), g.normal(size=3), g.normal(size=(4, 3))
    fast = lrp.linear_z(x, W, b, x @ W + b, R)
    assert np.allclose(fast, ref.slow_linear_z(x, W, R), atol=1e-12)
    assert np.allclose(fast.sum(-1), R.sum(-1), atol=1e-12)
    assert not np.allclose(lrp.linear_epsilon(x, W, b, None, R, 0.0).sum(-1), R.sum(-1), atol=1e-3)
    Wb = g.normal(size=(4, 5, 1))
    Rb = g.normal(size=(4, 1, 1))
    fast_b = lrp.linear_z(x[:, None, :], Wb, None, None, Rb)                  # (4, 1, 5)
    for n in range(4):
        assert np.allclose(fast_b[n], ref.slow_linear_z(x[n:n + 1], Wb[n], Rb[n]), atol=1e-12)


def test_layernorm_z_matches_loops_and_conserves():
    """LayerNorm with rstd held constant, y_j = sum_i x_i M_ij + b_j, M_ij = rstd g_j (delta_ij - 1/d), under the
    z-rule (beta not an input): R_i = x_i rstd (g_i s_i - mean_j g_j s_j), s_j = R_j / (y_j - b_j), against its
    slow twin; conserving to 1e-12 with a random beta."""
    g = np.random.default_rng(41)
    x, gain, bb, R = g.normal(size=(3, 5)) + 0.3, g.normal(size=5), g.normal(size=5), g.normal(size=(3, 5))
    y, c = layernorm_forward(x, gain, bb)
    fast = lrp.layernorm_z(x, y, c[2], gain, R, bb)
    assert np.allclose(fast, ref.slow_layernorm_z(x, gain, bb, R), atol=1e-10)
    assert np.allclose(fast.sum(-1), R.sum(-1), atol=1e-12)
    Rx, Rf = lrp.residual_z(x, y, R)
    assert np.allclose(Rx + Rf, R, atol=1e-12)
    A, Q, K, V, Z, scale, RZ = _attn_inputs(42)
    _, _, RV = lrp.attention_values_z(A, Q, K, V, Z, scale, RZ)
    assert np.allclose(RV, ref.slow_attention_values(A, V, RZ), atol=1e-10)


def test_official_rules_match_loops_and_conserve():
    """The official code's variant against its slow twins: impacts z_ij = J_ji x_i + f(0)_j / n_in (bias, or LN
    beta, spread over the inputs), alpha = beta = 0.5 normalised apart with eps = 1e-5, then each token row
    (each sentence and head in attention) rescaled to the output's sum |R|: linear (shared and batched
    weight), residual, LayerNorm with its TRUE Jacobian, attention value path. Every rule conserves sum |R|
    per row to 1e-12, and nonnegative relevance stays nonnegative."""
    g = np.random.default_rng(43)
    x, W, b, R = g.normal(size=(4, 5)), g.normal(size=(5, 3)), g.normal(size=3), np.abs(g.normal(size=(4, 3)))
    fast = lrp.linear_official(x, W, b, None, R)
    assert np.allclose(fast, ref.slow_linear_official(x, W, b, R), atol=1e-12)
    assert np.allclose(np.abs(fast).sum(-1), np.abs(R).sum(-1), atol=1e-12) and fast.min() >= 0
    Wb, bsel, Rb = g.normal(size=(4, 5, 1)), g.normal(size=(4, 1, 1)), np.abs(g.normal(size=(4, 1, 1)))
    fast_b = lrp.linear_official(x[:, None, :], Wb, bsel, None, Rb)          # (4, 1, 5)
    for n in range(4):
        want = ref.slow_linear_official(x[n:n + 1], Wb[n], bsel[n, 0], Rb[n])
        assert np.allclose(fast_b[n], want, atol=1e-12)
    xr, fr, Rr = g.normal(size=(3, 4)), g.normal(size=(3, 4)), np.abs(g.normal(size=(3, 4)))
    Rx, Rf = lrp.residual_official(xr, fr, Rr)
    sx, sf = ref.slow_residual_official(xr, fr, Rr)
    assert np.allclose(Rx, sx, atol=1e-12) and np.allclose(Rf, sf, atol=1e-12)
    assert np.allclose(np.abs(Rx).sum(-1) + np.abs(Rf).sum(-1), Rr.sum(-1), atol=1e-12)
    xl, gain, bb, Rl = g.normal(size=(3, 5)) + 0.3, g.normal(size=5), g.normal(size=5), np.abs(g.normal(size=(3, 5)))
    y, c = layernorm_forward(xl, gain, bb)
    fast_ln = lrp.layernorm_official(xl, y, c[2], gain, Rl, bb)
    assert np.allclose(fast_ln, ref.slow_layernorm_official(xl, gain, bb, Rl), atol=1e-10)
    assert np.allclose(np.abs(fast_ln).sum(-1), Rl.sum(-1), atol=1e-12)
    A, Q, K, V, Z, scale, RZ = _attn_inputs(44)
    RZ = np.abs(RZ)
    _, _, RV = lrp.attention_values_official(A, Q, K, V, Z, scale, RZ)
    assert np.allclose(RV, ref.slow_attention_values_official(A, V, RZ), atol=1e-10)
    assert np.allclose(np.abs(RV).sum((-1, -2)), RZ.sum((-1, -2)), atol=1e-12)


def test_alphabeta_conserves_when_both_signs_present():
    """With b = 0 and every output having positive and negative contributions, sum_i R_i = sum_j R_j
    under alpha + beta = 1 ('sum') and alpha - beta = 1 ('difference')."""
    g = np.random.default_rng(2)
    x = np.abs(g.normal(size=(6, 8)))
    W = g.normal(size=(8, 4))
    W[0], W[1] = np.abs(W[0]), -np.abs(W[1])                # each column has both signs
    R = g.normal(size=(6, 4))
    for a, bt, conv in [(0.5, 0.5, "sum"), (2.0, 1.0, "difference")]:
        Ri = lrp.linear_alphabeta(x, W, None, None, R, a, bt, conv, eps=0.0)
        assert np.allclose(Ri.sum(-1), R.sum(-1), atol=1e-12)


def test_residual_matches_loops():
    """R_x = x / y R_y and R_f = f / y R_y element by element, y = x + f."""
    g = np.random.default_rng(3)
    x, f, R = g.normal(size=(3, 4)), g.normal(size=(3, 4)), g.normal(size=(3, 4))
    Rx, Rf = lrp.residual_proportional(x, f, R, eps=0.0)
    for n, i in itertools.product(range(3), range(4)):
        y = x[n, i] + f[n, i]
        assert abs(Rx[n, i] - x[n, i] / y * R[n, i]) < 1e-12 and abs(Rf[n, i] - f[n, i] / y * R[n, i]) < 1e-12
    assert np.allclose(Rx + Rf, R)


def test_residual_z_output_bias_is_not_an_input():
    """y = x + f with f = f_in + b (b: the bias of f's last linear layer). The z-rule splits by the input terms,
    R_x = x / (x + f_in) R_y and R_f = f_in / (x + f_in) R_y, element by element against loops; conserving.
    Where f_in = 0 exactly (a token whose FFN ReLUs are all off, f = b) the skip path takes all of R_y, while a
    split by f itself hands the bias a share that the linear rule below (denominator f_in = 0) passes nowhere."""
    g = np.random.default_rng(5)
    x, f_in, b, R = g.normal(size=(3, 4)), g.normal(size=(3, 4)), g.normal(size=4), g.normal(size=(3, 4))
    f_in[1] = 0.0                                            # token 1: f = b only
    f = f_in + b
    Rx, Rf = lrp.residual_z(x, f, R, f_in=f_in)
    for n, i in itertools.product(range(3), range(4)):
        y_in = x[n, i] + f_in[n, i]
        assert abs(Rx[n, i] - x[n, i] / y_in * R[n, i]) < 1e-12 and abs(Rf[n, i] - f_in[n, i] / y_in * R[n, i]) < 1e-12
    assert np.allclose(Rx + Rf, R, atol=1e-12) and np.all(Rf[1] == 0) and np.allclose(Rx[1], R[1], atol=1e-12)
    a = g.normal(size=(3, 6))
    a[1] = 0.0
    W = g.normal(size=(6, 4))                                # f's last linear layer: f_in = a W
    for by_input_part in (True, False):                      # split by f_in = a W (the rule) or by f = a W + b
        Rx, Rf = lrp.residual_z(x, a @ W + b, R, f_in=a @ W if by_input_part else None)
        Ra = lrp.linear_z(a, W, b, None, Rf)                # what reaches f's input a
        assert np.allclose(Rx.sum() + Ra.sum(), R.sum(), atol=1e-10) == by_input_part


def test_z_rule_conserves_through_dead_ffn():
    """A model whose encoder FFN has every ReLU off for every token (b1 very negative: the FFN emits b2 only)
    still conserves relevance under the z-rule, stage by stage, to 1e-10 (float64): the residual gives the FFN
    branch only its input part, which is 0 there (the no-dropout quick model has such tokens in its upper layers)."""
    cfg, params = toy_model(True, True, biases=True)
    params = dict(params)
    params["enc0.ffn.b1"] = params["enc0.ffn.b1"] - 1e3
    batch = toy_batch(np.random.default_rng(46), cfg.vocab_size)
    n_real = batch.tgt_mask.sum(1).astype(float)
    r = lrp.relevance(params, cfg, batch, rules=lrp.Rules(linear="z"))
    for stage, tot in r.totals.items():
        assert np.allclose(tot, n_real, atol=1e-10), (stage, tot, n_real)


def test_layernorm_linear_matches_loops():
    """LN with the std held fixed is y_j = sum_i x_i M_ij + b_j, M_ij = rstd g_j (delta_ij - 1/d); the
    rule is R_i = sum_j x_i M_ij R_j / (y_j + eps sign y_j); conserves when b = 0."""
    g_ = np.random.default_rng(4)
    x, gain, beta, R = g_.normal(size=(3, 5)) + 0.7, g_.normal(size=5), g_.normal(size=5), g_.normal(size=(3, 5))
    for bb in (beta, 0 * beta):
        y, c = layernorm_forward(x, gain, bb)
        rstd = c[2]
        fast = lrp.layernorm_linear(x, y, rstd, gain, R, eps=0.0)
        slow = np.zeros_like(x)
        for n in range(3):
            for j in range(5):
                for i in range(5):
                    M = rstd[n, 0] * gain[j] * ((i == j) - 1 / 5)
                    slow[n, i] += x[n, i] * M * R[n, j] / y[n, j]
        assert np.allclose(fast, slow, atol=1e-10)
    assert np.allclose(fast.sum(-1), R.sum(-1), atol=1e-10)                 # b = 0: conserved
    assert lrp.layernorm_identity(x, y, rstd, gain, R) is R


def _attn_inputs(seed, B=2, H=2, Tq=3, Tk=4, dh=3, masked=True):
    g = np.random.default_rng(seed)
    Q, K, V = g.normal(size=(B, H, Tq, dh)), g.normal(size=(B, H, Tk, dh)), g.normal(size=(B, H, Tk, dh))
    scale = 1 / np.sqrt(dh)
    S = Q @ K.swapaxes(-1, -2) * scale
    if masked:
        S[0, :, :, -1] = -1e9                                # a padded key
    A = np.exp(S - S.max(-1, keepdims=True))
    A /= A.sum(-1, keepdims=True)
    Z = A @ V
    R = g.normal(size=Z.shape)
    return A, Q, K, V, Z, scale, R


def test_attention_values_matches_loops():
    """Weights held constant: R_V[k, c] = sum_q A_qk V_kc R_Z[q, c] / Z_qc; R_Q = R_K = None; conserves."""
    A, Q, K, V, Z, scale, R = _attn_inputs(5)
    _, _, RV = lrp.attention_values(A, Q, K, V, Z, scale, R, eps=0.0)
    B, H, Tq, Tk = A.shape
    slow = np.zeros_like(V)
    for b, h, q, k, c in itertools.product(range(B), range(H), range(Tq), range(Tk), range(V.shape[-1])):
        slow[b, h, k, c] += A[b, h, q, k] * V[b, h, k, c] * R[b, h, q, c] / Z[b, h, q, c]
    assert np.allclose(RV, slow, atol=1e-10)
    assert np.allclose(RV.sum((-1, -2)), R.sum((-1, -2)))


def test_attention_full_matches_loops():
    """Full rule: R_V = w V_kc sum_q A_qk s_qc, R_A = (1 - w) A_qk sum_c V_kc s_qc (s = R_Z / Z),
    R_S = R_A, R_Q = 1/2 sum_k Q_qc K_kc scale R_S / S_qk, R_K = 1/2 sum_q (same); conserves."""
    A, Q, K, V, Z, scale, R = _attn_inputs(6)
    w = 0.3
    RQ, RK, RV = lrp.attention_full(A, Q, K, V, Z, scale, R, eps=0.0, value_share=w)
    B, H, Tq, Tk = A.shape
    dh = V.shape[-1]
    sQ, sK, sV = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
    for b, h, q, k in itertools.product(range(B), range(H), range(Tq), range(Tk)):
        S = sum(Q[b, h, q, c] * K[b, h, k, c] for c in range(dh)) * scale
        RA = 0.0
        for c in range(dh):
            share = A[b, h, q, k] * V[b, h, k, c] * R[b, h, q, c] / Z[b, h, q, c]
            sV[b, h, k, c] += w * share
            RA += (1 - w) * share
        for c in range(dh):
            sQ[b, h, q, c] += 0.5 * Q[b, h, q, c] * K[b, h, k, c] * scale * RA / S
            sK[b, h, k, c] += 0.5 * Q[b, h, q, c] * K[b, h, k, c] * scale * RA / S
    for fast, slow in ((RQ, sQ), (RK, sK), (RV, sV)):
        assert np.allclose(fast, slow, atol=1e-9)
    assert np.allclose(RQ.sum((-1, -2)) + RK.sum((-1, -2)) + RV.sum((-1, -2)), R.sum((-1, -2)))


def test_rules_broadcast_over_leading_axes():
    """A leading axis on R (one slice per starting position) gives the same as each slice alone."""
    A, Q, K, V, Z, scale, _ = _attn_inputs(7)
    g = np.random.default_rng(8)
    R = g.normal(size=(3,) + Z.shape)
    for rule in (lrp.attention_values, lrp.attention_full):
        out = rule(A, Q, K, V, Z, scale, R)
        for p in range(3):
            one = rule(A, Q, K, V, Z, scale, R[p])
            for a, b in zip(out, one):
                assert (a is None and b is None) or np.allclose(a[p], b)
    x, W, b = g.normal(size=(2, 4, 5)), g.normal(size=(5, 3)), g.normal(size=3)
    R = g.normal(size=(3, 2, 4, 3))
    for p in range(3):
        assert np.allclose(lrp.linear_epsilon(x, W, b, None, R)[p], lrp.linear_epsilon(x, W, b, None, R[p]))
        assert np.allclose(lrp.linear_alphabeta(x, W, b, None, R)[p], lrp.linear_alphabeta(x, W, b, None, R[p]))


def test_registry_and_bad_names():
    """Every rule is registered by layer type and family, and Rules dispatches through the registry (a rule
    swapped in the registry is the one called); the default family is the paper's z-rule; unknown names and
    bad constants raise LRPError."""
    assert set(lrp.RULES) == {"linear", "residual", "layernorm", "attention", "elementwise", "embedding"}
    for layer in ("linear", "residual", "layernorm", "attention"):
        assert set(lrp_rules.FAMILIES) <= set(lrp.RULES[layer]), layer
    assert lrp.RULES["linear"]["epsilon"] is lrp.linear_epsilon
    assert lrp.RULES["linear"]["z"] is lrp.linear_z and lrp.RULES["linear"]["official"] is lrp.linear_official
    assert lrp.RULES["attention"]["epsilon"] is lrp.attention_values
    rules = lrp.Rules()
    assert rules.linear == "z" and rules.rule("layernorm") is lrp.layernorm_z
    assert lrp.Rules(linear="official").rule("attention") is lrp.attention_full_official   # its default
    assert lrp.Rules(linear="official", attention="values").rule("attention") is lrp.attention_values_official
    assert lrp.Rules(layernorm="identity").rule("layernorm") is lrp.layernorm_identity
    calls = []
    saved = lrp.RULES["linear"]["z"]
    try:
        lrp.RULES["linear"]["z"] = lambda x, W, b, z, R: calls.append(1) or R
        rules.lin(np.ones((1, 2)), np.ones((2, 2)), None, None, np.ones((1, 2)))
    finally:
        lrp.RULES["linear"]["z"] = saved
    assert calls == [1]
    with pytest.raises(lrp.LRPError, match="unknown attention rule"):
        lrp.Rules(attention="softmax")
    with pytest.raises(lrp.LRPError, match="eps"):
        lrp.Rules(eps=-1.0)
    with pytest.raises(lrp.LRPError, match="value_share"):
        lrp.Rules(value_share=2.0)
    with pytest.raises(lrp.LRPError, match="convention"):
        lrp.Rules(linear="alphabeta", convention="both")


# ----------------------------------------------------------------------------- LRP-0 = gradient x input
def test_lrp0_equals_gradient_times_input():
    """Bias-free ReLU MLP y = relu(relu(x W1) W2) W3: LRP-0 (eps = 0) started at output k with R_k = y_k
    gives R_x = x * d y_k / d x (Montavon et al. 2019, sec. 10.2.1)."""
    g = np.random.default_rng(9)
    x = g.normal(size=(4, 6))
    W1, W2, W3 = g.normal(size=(6, 7)), g.normal(size=(7, 5)), g.normal(size=(5, 3))
    k = 1
    h1 = x @ W1
    a1 = np.maximum(h1, 0)
    h2 = a1 @ W2
    a2 = np.maximum(h2, 0)
    y = a2 @ W3
    R = np.zeros_like(y)
    R[:, k] = y[:, k]
    Ra2 = lrp.linear_epsilon(a2, W3, None, y, R, eps=0.0)
    Ra1 = lrp.linear_epsilon(a1, W2, None, h2, lrp.elementwise_identity(Ra2), eps=0.0)
    Rx = lrp.linear_epsilon(x, W1, None, h1, lrp.elementwise_identity(Ra1), eps=0.0)

    def f(x_):
        return (anp.maximum(anp.maximum(x_ @ W1, 0) @ W2, 0) @ W3)[:, k].sum()
    gxi = x * autograd.grad(f)(x)
    assert np.allclose(Rx, gxi, atol=1e-10)
    assert np.allclose(Rx.sum(-1), y[:, k])                  # and it is conserving


# ----------------------------------------------------------------------------- one attention layer by hand
def test_attention_layer_constant_weights_by_hand():
    """One attention layer (W^Q, W^K, W^V, W^O, gates, no biases), relevance from the output to the key/
    value input with A held constant, every step written as explicit loops:
    R_cat[q, m] = sum_n cat_qm Wo_mn R_qn / out_qn;  R_V[k, h, c] = sum_q A_hqk V_khc R_cat[q, h, c] / Z_qhc;
    R_x[k, i] = sum_m x_ki Wv_im R_V[k, m] / v_km."""
    g = np.random.default_rng(10)
    B, T, d, H = 1, 3, 4, 2
    dh = d // H
    p = {n: g.normal(size=(d, d)) for n in ("Wq", "Wk", "Wv", "Wo")}
    p.update({n: np.zeros(d) for n in ("bq", "bk", "bv", "bo")})
    x = g.normal(size=(B, T, d))
    gate = np.array([0.7, 1.0])
    bias = np.zeros((B, 1, 1, T))
    out, c = mha_forward(x, x, p, bias, H, gate)
    R = g.normal(size=out.shape)
    R_Z, R_q, R_kv = lrp._mha_relprop(R, c, out, p, lrp.Rules())
    assert isinstance(R_q, float) and R_q == 0.0             # no relevance through the queries
    cat, A, Vh, v = c["concat"][0], c["A"][0], c["V"][0], x[0] @ p["Wv"]
    Rcat = np.zeros((T, d))
    for q, m, n in itertools.product(range(T), range(d), range(d)):
        Rcat[q, m] += cat[q, m] * p["Wo"][m, n] * R[0, q, n] / out[0, q, n]
    Rv = np.zeros((T, d))
    for h, q, k, cc in itertools.product(range(H), range(T), range(T), range(dh)):
        Zq = sum(A[h, q, kk] * Vh[h, kk, cc] for kk in range(T))
        Rv[k, h * dh + cc] += A[h, q, k] * Vh[h, k, cc] * Rcat[q, h * dh + cc] / Zq
    Rx = np.zeros((T, d))
    for k, i, m in itertools.product(range(T), range(d), range(d)):
        Rx[k, i] += x[0, k, i] * p["Wv"][i, m] * Rv[k, m] / v[k, m]
    assert np.allclose(R_Z[0].swapaxes(0, 1).reshape(T, d), Rcat, atol=1e-10)   # the gate passes R on
    assert np.allclose(R_kv[0], Rx, atol=1e-9)
    assert np.isclose(Rx.sum(), R.sum())


# ----------------------------------------------------------------------------- whole model
CONFIGS = [(True, True, "values"), (True, True, "full"), (False, False, "values"), (False, False, "full")]


@pytest.mark.parametrize("pre_norm,shared,attention", CONFIGS,
                         ids=[f"{'pre' if a else 'post'}-{'shared' if b else 'sep'}-{c}" for a, b, c in CONFIGS])
def test_conservation_bias_free(pre_norm, shared, attention, record_property):
    """Epsilon family (eps = 0): with every bias and LN beta zero the total relevance after every stage equals
    the number of real target positions of each sentence (1 per position), and the source plus target
    embeddings receive exactly that; with biases on, the biases absorb a share (drift recorded and printed:
    why the paper's z-rule leaves the bias out of the denominator)."""
    gen = np.random.default_rng(12)
    cfg, params = toy_model(pre_norm, shared, biases=False)
    batch = toy_batch(gen, cfg.vocab_size)
    n_real = batch.tgt_mask.sum(1).astype(float)             # (B,)
    r = lrp.relevance(params, cfg, batch, rules=lrp.Rules(linear="epsilon", eps=0.0, attention=attention))
    assert np.array_equal(r.n_start, n_real)
    stages = list(r.totals)
    assert stages[0] == "logits" and stages[-1] == "src_emb" and len(stages) >= 3 * cfg.n_dec_layers + 2 * cfg.n_enc_layers
    for stage, tot in r.totals.items():
        assert np.allclose(tot, n_real, atol=1e-6), (stage, tot, n_real)
    assert np.allclose(r.src.sum(1) + r.tgt.sum(1), n_real, atol=1e-6)
    assert np.abs(r.src[0, 4:]).max() == 0.0 and np.abs(r.tgt[2, 3:]).max() == 0.0   # padding gets none
    # the token embedding and the positional encoding share the input relevance
    assert np.abs(r.src_token - r.src).max() > 1e-3 and np.abs(r.src_token[0, 4:]).max() == 0.0

    cfg_b, params_b = toy_model(pre_norm, shared, biases=True)
    rb = lrp.relevance(params_b, cfg_b, batch, rules=lrp.Rules(linear="epsilon", eps=0.0, attention=attention))
    drift = float(np.abs((rb.src.sum(1) + rb.tgt.sum(1)) - n_real).max() / n_real.max())
    record_property("relative_drift_with_biases", drift)
    print(f"relative drift of total relevance with biases on ({pre_norm=}, {attention=}): {drift:.3g}")
    assert np.isfinite(drift) and drift > 1e-6              # biases do absorb relevance


def test_official_attention_full_jacobian_matches_loops_and_autograd():
    """The official attention rule (consider_attn_constant = False): its impacts are the Jacobian of the attention
    core Z = softmax(scale Q K^T) V times the inputs (checked against autograd's Jacobian, masked key included);
    the alpha-beta split over all q, k, v inputs of each output and the joint per-head rescale match the slow
    twin; sum |R_Q| + |R_K| + |R_V| = sum |R_Z| per sentence and head; a leading axis broadcasts."""
    A, Q, K, V, Z, scale, R = _attn_inputs(46)
    R = np.abs(R)
    mask = np.where(A > 0, 0.0, -1e9)[:, :, :1, :]                           # the padded key of _attn_inputs

    def core(q, k, v, b, h):
        s_ = q @ k.T * scale + mask[b, h]
        a = anp.exp(s_ - s_.max(-1, keepdims=True))
        return (a / a.sum(-1, keepdims=True)) @ v
    zq, zk, zv = lrp_rules.attention_impacts_official(A, Q, K, V, Z, scale)
    for b, h in itertools.product(range(2), range(2)):
        q, k, v = Q[b, h], K[b, h], V[b, h]
        Jq = autograd.jacobian(lambda x: core(x, k, v, b, h))(q)               # (Tq, dh, Tq, dh)
        Jk = autograd.jacobian(lambda x: core(q, x, v, b, h))(k)               # (Tq, dh, Tk, dh)
        Jv = autograd.jacobian(lambda x: core(q, k, x, b, h))(v)
        Tq = q.shape[0]
        want_q = np.stack([Jq[i, :, i, :] * q[i][None, :] for i in range(Tq)])  # only its own query row
        assert np.allclose(zq[b, h], want_q, atol=1e-10)
        assert np.allclose(zk[b, h], Jk * k[None, None], atol=1e-10)
        assert np.allclose(zv[b, h], np.einsum("qckc->qck", Jv * v[None, None]), atol=1e-10)
    fast = lrp.attention_full_official(A, Q, K, V, Z, scale, R)
    slow = ref.slow_attention_full_official(A, Q, K, V, scale, R)
    for f, s_ in zip(fast, slow):
        assert np.allclose(f, s_, atol=1e-10)
    tot = sum(np.abs(x).sum((-1, -2)) for x in fast)
    assert np.allclose(tot, R.sum((-1, -2)), atol=1e-12)
    lead = np.stack([R, 2 * R])
    for f, one in zip(lrp.attention_full_official(A, Q, K, V, Z, scale, lead), fast):
        assert np.allclose(f[0], one) and np.allclose(f[1], 2 * one)


BIAS_CONFIGS = [(True, True, "z", "values"), (False, False, "z", "values"), (True, False, "z", "full"),
                (True, True, "official", "values"), (False, False, "official", "values"),
                (True, False, "official", "full")]


@pytest.mark.parametrize("pre_norm,shared,linear,attention", BIAS_CONFIGS,
                         ids=[f"{'pre' if a else 'post'}-{'shared' if b else 'sep'}-{c}-{d}" for a, b, c, d in BIAS_CONFIGS])
def test_conservation_with_random_biases(pre_norm, shared, linear, attention):
    """The paper's z-rule (bias not an input) and the official variant (bias spread over the inputs, every layer
    rescaled) conserve relevance with RANDOM biases and LayerNorm betas: after every stage the total equals the
    number of real target positions of each sentence to 1e-6, the source plus target embeddings receive exactly
    that, and the relevance of a layer's heads sums to that of its attention sublayer (b^O takes nothing)."""
    cfg, params = toy_model(pre_norm, shared, biases=True)
    batch = toy_batch(np.random.default_rng(45), cfg.vocab_size)
    n_real = batch.tgt_mask.sum(1).astype(float)
    r = lrp.relevance(params, cfg, batch, rules=lrp.Rules(linear=linear, attention=attention))
    for stage, tot in r.totals.items():
        assert np.allclose(tot, n_real, atol=1e-6), (stage, tot, n_real)
    assert np.allclose(r.src.sum(1) + r.tgt.sum(1), n_real, atol=1e-6)
    for k in lrp.KINDS:
        assert np.allclose(r.head[k].sum(-1), r.sublayer[k], atol=1e-6), k
        assert np.abs(r.sublayer[k]).max() > 1e-3, k
    if linear == "official":                                  # nonnegative transitions: nothing negative
        assert min(float(r.head[k].min()) for k in lrp.KINDS) >= -1e-12 and r.src.min() >= -1e-12


@pytest.mark.parametrize("pre_norm,shared", [(True, True), (False, False)], ids=["pre-shared", "post-sep"])
def test_alphabeta_model_is_positive_and_conserving(pre_norm, shared):
    """linear="alphabeta" (0.5 / 0.5, 'sum', fallback), weights constant, bias-free: every transition weight
    is >= 0, so every head, token and stage total is >= 0, and the total is still conserved exactly."""
    cfg, params = toy_model(pre_norm, shared)
    batch = toy_batch(np.random.default_rng(32), cfg.vocab_size)
    n_real = batch.tgt_mask.sum(1).astype(float)
    r = lrp.relevance(params, cfg, batch, rules=lrp.Rules(linear="alphabeta", eps=0.0))
    for stage, tot in r.totals.items():
        assert np.allclose(tot, n_real, atol=1e-9), stage
    for k in lrp.KINDS:
        assert r.head[k].min() >= -1e-12, k
        assert np.allclose(r.head[k].sum(-1), r.sublayer[k])
    assert r.src.min() >= -1e-12 and r.tgt.min() >= -1e-12 and r.src_token.min() >= -1e-12


@pytest.mark.parametrize("attention", ["values", "full"])
def test_head_relevance_sums_to_sublayer(attention):
    """Bias-free: the relevance of the heads of a layer, summed over heads, equals the relevance of that
    attention sublayer's output (W^O loses nothing without b^O), for all three attention types."""
    cfg, params = toy_model()
    batch = toy_batch(np.random.default_rng(13), cfg.vocab_size)
    r = lrp.relevance(params, cfg, batch, rules=lrp.Rules(eps=0.0, attention=attention))
    for kind in lrp.KINDS:
        assert r.head[kind].shape == (cfg.n_layers(kind), 3, cfg.n_heads)
        assert np.allclose(r.head[kind].sum(-1), r.sublayer[kind], atol=1e-9), kind
        assert np.abs(r.sublayer[kind]).max() > 1e-3                       # something flows through


def test_per_position_is_linear_split():
    """LRP-0/epsilon is linear in the starting relevance: the per-position relevances (any chunking)
    sum to the all-at-once ones, and each start carries exactly 1 (bias-free, eps = 0)."""
    cfg, params = toy_model(layers=1)
    batch = toy_batch(np.random.default_rng(14), cfg.vocab_size)
    r = lrp.relevance(params, cfg, batch, keep_full=True, rules=lrp.Rules(eps=0.0))
    for chunk in (None, 2):
        rp = lrp.relevance(params, cfg, batch, per_position=True, chunk=chunk, keep_full=True, rules=lrp.Rules(eps=0.0))
        assert rp.head["enc"].shape == (1, 3, 5, cfg.n_heads) and rp.src.shape == (3, 5, 6)
        for kind in lrp.KINDS:
            assert np.allclose(rp.head[kind].sum(2), r.head[kind], atol=1e-10)
            assert np.allclose(rp.full[kind][0].sum(1), r.full[kind][0], atol=1e-10)
        assert np.allclose(rp.src.sum(1), r.src) and np.allclose(rp.tgt.sum(1), r.tgt)
        assert np.allclose(rp.totals["src_emb"], batch.tgt_mask.astype(float), atol=1e-9)
    # decoder self-attention is causal: a start at t sends nothing to target tokens after t
    assert np.abs(np.triu(np.ones((5, 5)), 1)[None] * rp.tgt).max() < 1e-12


def test_gated_off_head_gets_no_relevance():
    """A head whose gate is 0 contributes nothing to W^O's input, so its relevance is exactly 0."""
    cfg, params = toy_model()
    batch = toy_batch(np.random.default_rng(15), cfg.vocab_size)
    gates = {k: np.ones((2, 2)) for k in model.GATE_KINDS}
    gates["dec_enc"][1, 0] = 0.0
    r = lrp.relevance(params, cfg, batch, gates=gates)
    assert np.abs(r.head["dec_enc"][1, :, 0]).max() == 0.0
    assert np.abs(r.head["dec_enc"][1, :, 1]).max() > 0


def test_dropout_cache_and_bad_chunk_rejected():
    """The rules assume the evaluation forward; a cache with dropout masks is refused."""
    cfg, params = toy_model(layers=1)
    batch = toy_batch(np.random.default_rng(16), cfg.vocab_size)
    logits, cache = model.forward(params, cfg, batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask,
                                  rng=backend.rng(0))
    with pytest.raises(lrp.LRPError, match="dropout"):
        lrp._check_eval(cache)
    with pytest.raises(lrp.LRPError, match="chunk"):
        lrp.relevance(params, cfg, batch, per_position=True, chunk=0)


@pytest.mark.parametrize("linear", ["z", "official", "epsilon", "alphabeta"])
def test_float32_model_gives_float32_relevance(linear):
    """No silent upcast: a float32 model's relevances stay float32 (memory and speed of the pass)."""
    cfg = model.Config(vocab_size=23, n_enc_layers=1, n_dec_layers=1, n_heads=2, d_model=8, d_ff=12)
    params = model.init_params(cfg, 0)
    r = lrp.relevance(params, cfg, toy_batch(np.random.default_rng(18), 23), rules=lrp.Rules(linear=linear, attention="full"))
    assert r.head["enc"].dtype == r.src.dtype == r.totals["src_emb"].dtype == np.float32
