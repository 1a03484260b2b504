"""Hard-concrete head gates (minihead/gates.py): the specification.

Formulas (Louizos et al. 2018, eq. 9, 12, 13; Voita et al. 2019, sec. 6), defaults beta=0.33, gamma=-0.1, zeta=1.1:
  s = sigmoid((log u - log(1-u) + log_alpha) / beta),  s_bar = s (zeta - gamma) + gamma,  g = clip(s_bar, 0, 1)
  P(g != 0) = sigmoid(log_alpha - beta log(-gamma / zeta))
  test-time g = clip(sigmoid(log_alpha) (zeta - gamma) + gamma, 0, 1)
Gradient checks run in float64 against central differences and against autograd.numpy formulas written here,
independently of the package.
"""
import math

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

from minihead.toy import prune_useless_heads

from minihead import backend
from minihead.gradcheck import numerical_grad, rel_error
from minihead.gates import (LOG_ALPHA_OPEN, GateError, HardConcrete, init_log_alpha, l0_total,
                            l0_total_backward, settled_share)

HC = HardConcrete()
B, G, Z = HC.beta, HC.gamma, HC.zeta


# ------------------------------------------------------------------ helpers
# numerical_grad(f, x) perturbs x in place and calls the closure f(); rel_error(a, b) = max|a - b| / (max|a| + max|b|).


def ag_sigmoid(x):
    return 1.0 / (1.0 + anp.exp(-x))


def ag_sample(log_alpha, u):
    """Independent autograd.numpy hard-concrete sample (Louizos eq. 9)."""
    s = ag_sigmoid((anp.log(u) - anp.log(1 - u) + log_alpha) / B)
    return anp.clip(s * (Z - G) + G, 0.0, 1.0)


def ag_penalty(log_alpha):
    """Independent autograd.numpy P(g != 0) (Louizos eq. 12)."""
    return ag_sigmoid(log_alpha - B * anp.log(-G / Z))


def interior_points():
    """log_alpha and u (float64) with 0.05 < s_bar < 0.95 everywhere, so the clip is inactive."""
    la = np.array([-1.5, -0.7, 0.0, 0.3, 1.1, 2.0])
    u = np.array([0.75, 0.6, 0.45, 0.5, 0.3, 0.2])
    g, cache = HC.sample_forward(la, u)
    s_bar = cache[1]
    assert np.all((s_bar > 0.05) & (s_bar < 0.95)), s_bar  # precondition of the interior tests
    return la, u


# ------------------------------------------------------------------ sample: gradient
def test_sample_backward_interior_matches_central_differences():
    """dg/dlog_alpha = (zeta - gamma) s (1 - s) / beta where 0 < s_bar < 1, checked on sum(dg * g)."""
    la, u = interior_points()
    dg = backend.rng(0).standard_normal(la.shape)
    _, cache = HC.sample_forward(la, u)
    analytic = HC.sample_backward(dg, cache)
    numeric = numerical_grad(lambda: np.sum(dg * HC.sample_forward(la, u)[0]), la)
    assert rel_error(analytic, numeric) < 1e-8
    assert np.all(analytic != 0)
    assert analytic.dtype == np.float64


def test_sample_backward_matches_autograd_with_broadcast_noise():
    """Same formula, u of shape (B, H) broadcast against log_alpha (H,): the gradient is summed over B.
    Points are random, so some are clipped and some are not; autograd's clip also passes zero there."""
    r = backend.rng(1)
    la = r.uniform(-3, 3, size=6)                               # (H,)
    u = HC.draw_u(r, (5, 6), dtype="float64")                   # (B, H)
    dg = r.standard_normal((5, 6))                              # (B, H)
    g, cache = HC.sample_forward(la, u)
    assert g.shape == (5, 6)
    np.testing.assert_allclose(g, ag_sample(la, u), rtol=1e-12, atol=1e-15)
    clipped = (g == 0) | (g == 1)
    assert clipped.any() and (~clipped).any()                   # both regimes are exercised
    expected = autograd.grad(lambda x: anp.sum(dg * ag_sample(x, u)))(la)
    analytic = HC.sample_backward(dg, cache)
    assert analytic.shape == la.shape
    np.testing.assert_allclose(analytic, expected, rtol=1e-10, atol=1e-300)
    # log_alpha with a size-1 axis, like the official code's (1, H, 1, 1): summed there too, shape kept
    _, cache_k = HC.sample_forward(la[None, :], u)
    analytic_k = HC.sample_backward(dg, cache_k)
    assert analytic_k.shape == (1, 6)
    np.testing.assert_allclose(analytic_k[0], expected, rtol=1e-10, atol=1e-300)


def test_sample_backward_is_exactly_zero_where_clipped():
    """d clip(s_bar, 0, 1) / d s_bar = 0 where s_bar < 0 (g = 0) or s_bar > 1 (g = 1): no gradient flows."""
    la = np.array([-8.0, -5.0, 5.0, 8.0])
    u = np.array([0.5, 0.3, 0.7, 0.5])
    g, cache = HC.sample_forward(la, u)
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0, 1.0])
    dg = np.array([1.0, -2.0, 3.0, 0.5])
    analytic = HC.sample_backward(dg, cache)
    np.testing.assert_array_equal(analytic, np.zeros(4))
    numeric = numerical_grad(lambda: np.sum(dg * HC.sample_forward(la, u)[0]), la)
    np.testing.assert_array_equal(numeric, np.zeros(4))
    np.testing.assert_array_equal(autograd.grad(lambda x: anp.sum(dg * ag_sample(x, u)))(la), np.zeros(4))


# ------------------------------------------------------------------ penalty and its combination
def test_penalty_backward_matches_central_differences_and_autograd():
    """dP(g != 0)/dlog_alpha = p (1 - p) with p = sigmoid(log_alpha - beta log(-gamma / zeta)), also in the
    saturated tails (|log_alpha| = 12, where central differences are only good to ~1e-10 absolute)."""
    la = np.array([-12.0, -3.0, -0.5, 0.0, 0.8, 3.0, 12.0])
    dp = backend.rng(2).standard_normal(la.shape)
    p, cache = HC.penalty_forward(la)
    np.testing.assert_allclose(p, ag_penalty(la), rtol=1e-12)
    analytic = HC.penalty_backward(dp, cache)
    numeric = numerical_grad(lambda: np.sum(dp * HC.penalty_forward(la)[0]), la)
    expected = autograd.grad(lambda x: anp.sum(dp * ag_penalty(x)))(la)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-9)
    assert rel_error(analytic, numeric) < 1e-8
    np.testing.assert_allclose(analytic, expected, rtol=1e-10, atol=0)


@pytest.mark.parametrize("reduction", ["sum", "layer_mean"])
def test_l0_total_value_and_gradient(reduction):
    """L_C = c sum_l sum_h p_lh with c = 1 ("sum", paper eq. 6) or 1/L ("layer_mean", official code);
    dL_C/dp_lh = c. Checked on p directly and chained through penalty_forward to log_alpha (autograd)."""
    r = backend.rng(3)
    las = [r.uniform(-3, 3, size=n) for n in (4, 4, 2)]          # 3 layers, uneven head counts allowed
    c = 1.0 if reduction == "sum" else 1.0 / 3
    ps, pcaches = zip(*[HC.penalty_forward(la) for la in las])
    total, cache = l0_total(list(ps), reduction)
    assert float(total) == pytest.approx(c * sum(float(np.sum(p)) for p in ps), rel=1e-14)
    dps = l0_total_backward(2.0, cache)
    for p_l, dp_l in zip(ps, dps):
        assert dp_l.shape == p_l.shape and dp_l.dtype == p_l.dtype
        numeric = numerical_grad(lambda: 2.0 * l0_total(list(ps), reduction)[0], p_l)
        assert rel_error(dp_l, numeric) < 1e-8
        np.testing.assert_allclose(dp_l, 2.0 * c)
    # chain to log_alpha and compare with autograd on the whole composition
    dlas = [HC.penalty_backward(dp, pc) for dp, pc in zip(dps, pcaches)]
    ag_total = lambda xs: 2.0 * c * sum(anp.sum(ag_penalty(x)) for x in xs)
    expected = autograd.grad(ag_total)(las)
    for dla, e in zip(dlas, expected):
        np.testing.assert_allclose(dla, e, rtol=1e-10)
    # the same through one (L, H) array instead of a list of layers
    stacked = np.stack(las[:2])                                # (2, 4)
    total2, cache2 = l0_total(HC.penalty_forward(stacked)[0], reduction)
    c2 = 1.0 if reduction == "sum" else 0.5
    assert float(total2) == pytest.approx(c2 * float(np.sum(HC.penalty_forward(stacked)[0])), rel=1e-14)
    dp2 = l0_total_backward(1.0, cache2)
    assert dp2.shape == (2, 4) and np.all(dp2 == c2)


# ------------------------------------------------------------------ distribution
@pytest.mark.parametrize("log_alpha", [-3.0, -1.0, 0.0, 1.0, 3.0])
def test_penalty_matches_monte_carlo(log_alpha):
    """P(g != 0) = sigmoid(log_alpha - beta log(-gamma/zeta)) equals the fraction of 200k samples with g > 0,
    and P(g = 0), P(g = 1) from mass_at_0_and_1 match the fractions at exactly 0 and 1, all within 5 binomial
    standard errors sqrt(p (1 - p) / n)."""
    n = 200_000
    u = HC.draw_u(backend.rng(4), (n,), dtype="float64")
    g, _ = HC.sample_forward(np.full(n, log_alpha), u)
    p_open, _ = HC.penalty_forward(np.array(log_alpha))
    p0, p1 = HC.mass_at_0_and_1(np.array(log_alpha))
    assert float(p_open) == pytest.approx(1 - float(p0), abs=1e-14)
    for p, frac in ((p_open, np.mean(g > 0)), (p0, np.mean(g == 0)), (p1, np.mean(g == 1))):
        se = math.sqrt(float(p) * (1 - float(p)) / n)
        assert abs(frac - float(p)) < 5 * se + 1e-6, (log_alpha, float(p), frac, se)


@pytest.mark.parametrize("log_alpha", [-1.0, 0.0, 1.0])
def test_mass_at_exactly_zero_and_one(log_alpha):
    """For moderate log_alpha the clip puts positive mass on g = 0 and on g = 1 (both > 5% of samples)
    and on the open interval in between (what makes the gate trainable)."""
    u = HC.draw_u(backend.rng(5), (20_000,), dtype="float64")
    g, _ = HC.sample_forward(np.full(u.shape, log_alpha), u)
    assert np.mean(g == 0) > 0.05 and np.mean(g == 1) > 0.05
    assert np.mean((g > 0) & (g < 1)) > 0.05
    assert g.min() == 0.0 and g.max() == 1.0


def test_density_integrates_and_matches_histogram():
    """The continuous part of the density integrates to 1 - P(g=0) - P(g=1), and its integral over [0.2, 0.5]
    matches the fraction of samples there (5 binomial standard errors)."""
    la = 0.5
    x = np.linspace(1e-7, 1 - 1e-7, 400_001)
    q = HC.density(x, la)
    p0, p1 = HC.mass_at_0_and_1(la)
    assert np.trapezoid(q, x) == pytest.approx(1 - p0 - p1, abs=2e-4)
    n = 200_000
    g, _ = HC.sample_forward(np.full(n, la), HC.draw_u(backend.rng(6), (n,), dtype="float64"))
    band = (x >= 0.2) & (x <= 0.5)
    p_band = np.trapezoid(q[band], x[band])
    frac = np.mean((g >= 0.2) & (g <= 0.5))
    assert abs(frac - p_band) < 5 * math.sqrt(p_band * (1 - p_band) / n)
    np.testing.assert_array_equal(HC.density(np.array([-0.1, 0.0, 1.0, 1.2]), la), np.zeros(4))


def test_test_gate_at_known_points():
    """clip(sigmoid(la) (zeta-gamma) + gamma, 0, 1): 0 for very negative la, 1 for very positive, 0.5 at la = 0
    (0.5 * 1.2 - 0.1); pruned exactly from la <= log(-gamma/zeta) = -2.398, fully on from la >= log(11) = 2.398."""
    g = HC.test_gate(np.array([-30.0, -2.4, -2.39, 0.0, 2.39, 2.4, 30.0]))
    assert g[0] == 0.0 and g[1] == 0.0 and g[2] > 0.0
    assert g[3] == pytest.approx(0.5, abs=1e-15)
    assert g[4] < 1.0 and g[5] == 1.0 and g[6] == 1.0
    assert float(HC.test_gate(np.array(LOG_ALPHA_OPEN))) == 1.0   # the default init starts heads fully on


def test_binary_gate_is_the_larger_point_mass():
    """Paper's readout (sec. 6.1): g = 1 iff P(g = 1) >= P(g = 0), checked against mass_at_0_and_1 on a grid
    and with asymmetric (gamma, zeta) where the threshold (c0 + c1) / 2, c0 = beta log(-gamma/zeta),
    c1 = beta log((1-gamma)/(zeta-1)), is not 0; for the defaults it is 0, so a head with a continuous gate
    of 0.45 (log_alpha = -0.17) is closed here but kept by the continuous readout."""
    for hc in (HC, HardConcrete(beta=0.5, gamma=-0.3, zeta=1.05)):
        la = np.linspace(-6, 6, 241)
        p0, p1 = hc.mass_at_0_and_1(la)
        np.testing.assert_array_equal(hc.binary_gate(la), (p1 >= p0).astype(float))
        c0 = hc.beta * math.log(-hc.gamma / hc.zeta)
        c1 = hc.beta * math.log((1 - hc.gamma) / (hc.zeta - 1))
        assert hc.binary_threshold() == pytest.approx((c0 + c1) / 2, abs=1e-15)
    assert HardConcrete(gamma=-0.3, zeta=1.05).binary_threshold() != pytest.approx(0.0, abs=0.01)
    assert HC.binary_threshold() == pytest.approx(0.0, abs=1e-15)
    la = np.array([-0.17])
    assert HC.binary_gate(la)[0] == 0.0 and 0.4 < HC.test_gate(la)[0] < 0.5


def test_settled_share_counts_gates_near_a_point_mass():
    """A gate is settled when max(P(g = 0), P(g = 1)) > 0.95: for the defaults |log_alpha| > logit(0.95) +
    beta log(11) = 3.736; the open init (log_alpha = 3, P(g = 1) = 0.90) is NOT settled. settled_share pools
    the gates of every kind of a dict."""
    edge = math.log(0.95 / 0.05) + B * math.log(-Z / G)
    la = np.array([-edge - 1e-6, -edge + 1e-3, 0.0, LOG_ALPHA_OPEN, edge - 1e-3, edge + 1e-6])
    np.testing.assert_array_equal(HC.settled(la), [True, False, False, False, False, True])
    p0, p1 = HC.mass_at_0_and_1(la)
    np.testing.assert_array_equal(HC.settled(la), np.maximum(p0, p1) > 0.95)
    assert settled_share({"enc": la.reshape(2, 3), "dec_self": np.full((1, 2), 9.0)}) == pytest.approx(4 / 8)
    with pytest.raises(GateError, match="threshold"):
        HC.settled(la, 1.0)


def test_init_dtype_and_determinism():
    """init_log_alpha gives (H,) or (L, H) open gates in float32; draw_u with the same seed gives the same numbers, inside
    (eps, 1 - eps); float32 inputs stay float32 through forward and backward (the training dtype)."""
    la = init_log_alpha(8)
    assert la.shape == (8,) and la.dtype == np.float32 and np.all(la == LOG_ALPHA_OPEN)
    assert init_log_alpha((6, 8), dtype="float64").shape == (6, 8)
    with pytest.raises(GateError, match="positive"):
        init_log_alpha(0)
    u1 = HC.draw_u(backend.rng(7), (3, 8))
    u2 = HC.draw_u(backend.rng(7), (3, 8))
    np.testing.assert_array_equal(u1, u2)
    assert u1.dtype == np.float32 and u1.min() >= 1e-6 and u1.max() <= 1 - 1e-6
    g, cache = HC.sample_forward(la, u1)
    assert g.dtype == np.float32
    assert HC.sample_backward(np.ones_like(g), cache).dtype == np.float32
    p, pc = HC.penalty_forward(la)
    assert p.dtype == np.float32 and HC.penalty_backward(np.ones_like(p), pc).dtype == np.float32


def test_bad_input_raises_clear_errors():
    """Noise on the boundary, hyperparameters without mass at 0/1, unknown reductions are refused by name."""
    with pytest.raises(GateError, match="strictly inside"):
        HC.sample_forward(np.zeros(2), np.array([0.0, 0.5]))
    with pytest.raises(GateError, match="gamma < 0 and zeta > 1"):
        HardConcrete(gamma=0.0)
    with pytest.raises(GateError, match="beta"):
        HardConcrete(beta=0.0)
    with pytest.raises(GateError, match="reduction"):
        l0_total([np.zeros(2)], "mean")
    with pytest.raises(GateError, match="empty"):
        l0_total([], "sum")
    with pytest.raises(GateError, match=r"\(L, H\)"):
        l0_total(np.zeros(3), "sum")                            # a bare (H,) array is ambiguous: refused


# ------------------------------------------------------------------ the gates close on useless heads
def train_gates(seed, **kw):
    """Prune the toy heads of minihead.toy (the same toy chapter 4 shows): 6 heads with fixed outputs, the target
    reads heads 0 and 1 only, heads 2-5 are noise of scales 0.5, 1, 2, 3. loss = mean((sum_h g_h O_h W_h - y)^2)
    + lam * L_C with the project's Adam on log_alpha (lr) and on the read-out W (lr_w; 0 freezes it), from the
    converged W and log_alpha open. Returns test-time gates, log_alpha and its trajectory (steps, H)."""
    g, la, traj, _ = prune_useless_heads(seed, **kw)
    return g, la, traj


@pytest.mark.parametrize("lr_w", [0.0, 0.01])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gates_close_on_useless_heads(seed, lr_w):
    """With the default beta/gamma/zeta, lambda = 0.05 (paper's sum reduction), Adam lr = 0.1 on log_alpha,
    300 steps from log_alpha = 3 (all open), and the read-out W frozen or fine-tuned at lr 0.01, the test-time
    gates end exactly 0 on the 4 noise heads and exactly 1 on the 2 heads the target reads.

    What it needed: Adam moves log_alpha by about lr per step, and a gate is only pruned once log_alpha has
    travelled from +3 to below log(-gamma/zeta) = -2.4: ~50 steps here, ~490 at lr = 0.01, and at the
    NMT learning rates of ~1e-4 the gates look as if they "never close". Plain SGD is slower still: at
    log_alpha = 3 the penalty gradient is lambda p (1 - p) = 0.001 and the sample gradient is zero 90% of the
    time (the gate is clipped at 1)."""
    g, la, _ = train_gates(seed, lr_w=lr_w)
    np.testing.assert_array_equal(g[2:], np.zeros(4))
    np.testing.assert_array_equal(g[:2], np.ones(2))
    assert np.all(la[2:] < math.log(-G / Z)) and np.all(la[:2] > math.log((1 - G) / (Z - 1)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_without_penalty_no_gate_closes(seed):
    """Control: lambda = 0 with the read-out frozen at its least-squares fit closes no gate (the fit uses every
    head a little, so the data loss alone keeps them open): it is the L0 term that prunes."""
    g, _, _ = train_gates(seed, lam=0.0, lr_w=0.0)
    assert np.all(g > 0)


def test_too_small_learning_rate_leaves_gates_open():
    """Control for the docstring above: at lr = 0.01 the same 300 steps move the useless log_alpha from +3 only
    to about -0.5, short of -2.4, so their test-time gates are still open (~0.35) although heading down."""
    g, la, traj = train_gates(0, lr=0.01)
    assert np.all(g[2:] > 0) and np.all(la[2:] < 0)
    assert np.all(np.abs(np.diff(traj[:, 2:], axis=0)) < 0.05)  # Adam: each step moves about lr
