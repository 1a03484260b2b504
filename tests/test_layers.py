"""The specification of every layer's backward pass.

Each test builds a scalar L = sum(y * R) from the layer's output y and a fixed random upstream
gradient R, and checks the hand-written backward (which receives R) in float64 against
(1) central differences (minihead.gradcheck) and (2) autograd applied to the formula written out
independently with autograd.numpy. Relative error below 1e-6 everywhere.
"""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest

from minihead import layers
from minihead.gradcheck import numerical_grad, rel_error

TOL = 1e-6


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def check(name, analytic, f_scalar, x, ag_grad):
    """analytic vs central differences of f_scalar over x, and vs autograd's gradient."""
    num = numerical_grad(f_scalar, x)
    assert rel_error(analytic, num) < TOL, f"{name}: backward vs central differences"
    assert rel_error(analytic, ag_grad) < TOL, f"{name}: backward vs autograd"


def test_linear_backward(rng):
    """y = x W + b;  dL/dx = R W^T,  dL/dW = x^T R,  dL/db = sum_n R_n."""
    x, W, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(4, 5)), rng.normal(size=5)
    R = rng.normal(size=(2, 3, 5))
    y, cache = layers.linear_forward(x, W, b)
    dx, dW, db = layers.linear_backward(R, cache)
    ref = lambda x, W, b: anp.sum((anp.dot(x, W) + b) * R)
    gx, gW, gb = autograd.grad(ref, (0, 1, 2))(x, W, b)
    f = lambda: np.sum(layers.linear_forward(x, W, b)[0] * R)
    check("dx", dx, f, x, gx)
    check("dW", dW, f, W, gW)
    check("db", db, f, b, gb)


def test_embedding_backward_accumulates_repeated_ids(rng):
    """y = s E[ids];  dL/dE[v] = s sum_{t: ids_t = v} R_t  (repeated ids accumulate)."""
    E = rng.normal(size=(7, 4))
    ids = np.array([[1, 3, 3, 0], [6, 1, 2, 3]])
    R = rng.normal(size=(2, 4, 4))
    y, cache = layers.embedding_forward(ids, E, 2.0)
    dE = layers.embedding_backward(R, cache)
    gE = autograd.grad(lambda E: anp.sum(E[ids] * 2.0 * R))(E)
    check("dE", dE, lambda: np.sum(layers.embedding_forward(ids, E, 2.0)[0] * R), E, gE)


def test_sinusoidal_positions_match_the_formula():
    """PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(t / 10000^(2i/d))."""
    pe = layers.sinusoidal_positions(6, 8, "float64")
    t, i = 5, 3
    assert pe[t, 2 * i] == pytest.approx(np.sin(t / 10000 ** (2 * i / 8)))
    assert pe[t, 2 * i + 1] == pytest.approx(np.cos(t / 10000 ** (2 * i / 8)))


def test_layernorm_backward(rng):
    """y = g (x - mu) / sqrt(var + eps) + b;  dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = g R."""
    x, g, b = rng.normal(size=(3, 2, 6)), rng.normal(size=6), rng.normal(size=6)
    R = rng.normal(size=(3, 2, 6))
    y, cache = layers.layernorm_forward(x, g, b, 1e-6)
    dx, dg, db = layers.layernorm_backward(R, cache)

    def ref(x, g, b):
        mu = anp.mean(x, -1, keepdims=True)
        var = anp.mean((x - mu) ** 2, -1, keepdims=True)
        return anp.sum((g * (x - mu) / anp.sqrt(var + 1e-6) + b) * R)
    gx, gg, gb = autograd.grad(ref, (0, 1, 2))(x, g, b)
    f = lambda: np.sum(layers.layernorm_forward(x, g, b, 1e-6)[0] * R)
    check("dx", dx, f, x, gx)
    check("dg", dg, f, g, gg)
    check("db", db, f, b, gb)


def test_relu_backward(rng):
    """y = max(x, 0);  dx = R [x > 0] (points kept away from the kink at 0)."""
    x = rng.normal(size=(4, 5))
    x[np.abs(x) < 1e-3] = 0.5
    R = rng.normal(size=(4, 5))
    y, cache = layers.relu_forward(x)
    dx = layers.relu_backward(R, cache)
    gx = autograd.grad(lambda x: anp.sum(anp.maximum(x, 0) * R))(x)
    check("dx", dx, lambda: np.sum(layers.relu_forward(x)[0] * R), x, gx)


def test_dropout_seeded_mask_and_backward(rng):
    """y = x m / (1 - p) with m ~ Bernoulli(1 - p) from a seeded generator; dx = R m / (1 - p)."""
    x, R, p = rng.normal(size=(50, 40)), rng.normal(size=(50, 40)), 0.3
    y1, m1 = layers.dropout_forward(x, p, np.random.default_rng(7))
    y2, m2 = layers.dropout_forward(x, p, np.random.default_rng(7))
    assert np.array_equal(y1, y2), "same seed, same mask"
    assert abs((m1 == 0).mean() - p) < 0.03, "drop rate close to p"
    dx = layers.dropout_backward(R, m1)
    gx = autograd.grad(lambda x: anp.sum(x * m1 * R))(x)
    xs = x[:2, :3].copy()                   # element-wise differences on a slice, mask held fixed
    fs = lambda: np.sum(xs * m1[:2, :3] * R[:2, :3])
    assert rel_error(dx[:2, :3], numerical_grad(fs, xs)) < TOL
    assert rel_error(dx, gx) < TOL
    y_eval, c_eval = layers.dropout_forward(x, p, None)
    assert y_eval is x and c_eval is None, "no rng: identity (evaluation)"


def test_residual_backward(rng):
    """y = x + f;  dx = R, df = R."""
    x, fx, R = rng.normal(size=(2, 3)), rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    y, c = layers.residual_forward(x, fx)
    dx, dfx = layers.residual_backward(R, c)
    assert np.allclose(y, x + fx)
    check("dx", dx, lambda: np.sum(layers.residual_forward(x, fx)[0] * R), x,
          autograd.grad(lambda x: anp.sum((x + fx) * R))(x))
    assert np.array_equal(dfx, R)


def test_masked_softmax_backward(rng):
    """p = softmax(s + bias);  ds = p (R - sum_k R_k p_k); masked entries get p = 0 and ds = 0."""
    s, R = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    bias = np.zeros((3, 5))
    bias[0, 3:] = layers.NEG_INF
    p, c = layers.softmax_forward(s, bias)
    assert np.all(p[0, 3:] == 0) and np.allclose(p.sum(-1), 1)
    ds = layers.softmax_backward(R, c)

    def ref(s):
        z = s + bias
        e = anp.exp(z - anp.max(z, -1, keepdims=True))
        return anp.sum(e / anp.sum(e, -1, keepdims=True) * R)
    check("ds", ds, lambda: np.sum(layers.softmax_forward(s, bias)[0] * R), s, autograd.grad(ref)(s))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_label_smoothed_xent_backward_with_padding(rng, smoothing):
    """loss = sum_n m_n (-sum_v q_nv log softmax(z_n)_v) / sum m, q = (1 - e) onehot + e / V;
    dz_n = m_n (softmax(z_n) - q_n) / sum m (padded rows get zero gradient)."""
    N, V = 6, 7
    z, y = rng.normal(size=(N, V)), rng.integers(0, V, N)
    m = np.array([1, 1, 0, 1, 0, 1], bool)
    loss, nll_sum, c = layers.xent_forward(z, y, m, smoothing)
    dz = layers.xent_backward(c)
    assert np.all(dz[~m] == 0)

    def ref(z):
        logp = z - anp.log(anp.sum(anp.exp(z), -1, keepdims=True))
        q = (1 - smoothing) * np.eye(V)[y] + smoothing / V
        return anp.sum(-anp.sum(q * logp, -1) * m) / m.sum()
    assert float(loss) == pytest.approx(float(ref(z)), rel=1e-12)
    check("dz", dz, lambda: layers.xent_forward(z, y, m, smoothing)[0], z, autograd.grad(ref)(z))


def test_ffn_backward(rng):
    """FFN(x) = relu(x W1 + b1) W2 + b2 (dropout off); gradients for x, W1, b1, W2, b2."""
    d, f = 4, 6
    x = rng.normal(size=(2, 3, d))
    p = {"W1": rng.normal(size=(d, f)), "b1": rng.normal(size=f), "W2": rng.normal(size=(f, d)),
         "b2": rng.normal(size=d)}
    R = rng.normal(size=(2, 3, d))
    y, c = layers.ffn_forward(x, p, 0.0, None)
    dx, g = layers.ffn_backward(R, c)

    def ref(x, W1, b1, W2, b2):
        return anp.sum((anp.dot(anp.maximum(anp.dot(x, W1) + b1, 0), W2) + b2) * R)
    ag = autograd.grad(ref, (0, 1, 2, 3, 4))(x, p["W1"], p["b1"], p["W2"], p["b2"])
    f_ = lambda: np.sum(layers.ffn_forward(x, p, 0.0, None)[0] * R)
    check("dx", dx, f_, x, ag[0])
    for name, a in zip(["W1", "b1", "W2", "b2"], ag[1:]):
        check(name, g[name], f_, p[name], a)


def _mha_reference(xq, xkv, p, bias, H, gate):
    """Independent autograd formula: head_h = softmax(Q_h K_h^T / sqrt(dh) + bias) V_h, out = concat(g_h head_h) W^O + b^O."""
    B, Tq, d = xq.shape
    dh = d // H
    out = 0.0
    for h in range(H):                       # deliberately a loop over heads: a different code path
        sl = slice(h * dh, (h + 1) * dh)
        Q = anp.dot(xq, p["Wq"][:, sl]) + p["bq"][sl]
        K = anp.dot(xkv, p["Wk"][:, sl]) + p["bk"][sl]
        V = anp.dot(xkv, p["Wv"][:, sl]) + p["bv"][sl]
        S = anp.einsum("bqe,bke->bqk", Q, K) / np.sqrt(dh) + bias[:, 0]
        A = anp.exp(S - anp.max(S, -1, keepdims=True))
        A = A / anp.sum(A, -1, keepdims=True)
        Z = anp.einsum("bqk,bke->bqe", A, V) * gate[h]
        out = out + anp.dot(Z, p["Wo"][sl, :])
    return out + p["bo"]


@pytest.mark.parametrize("causal", [False, True])
def test_gated_multihead_attention_backward(rng, causal):
    """Multi-head attention with padding (and causal) masks and per-head gates: gradients of xq, xkv,
    all eight parameters and the gates, against central differences and an independent autograd formula."""
    B, T, d, H = 2, 4, 6, 3
    Tk = T if causal else 5
    xq, xkv = rng.normal(size=(B, T, d)), rng.normal(size=(B, Tk, d))
    p = {n: rng.normal(size=(d, d)) * 0.5 for n in ("Wq", "Wk", "Wv", "Wo")}
    p.update({n: rng.normal(size=d) * 0.1 for n in ("bq", "bk", "bv", "bo")})
    key_mask = np.ones((B, Tk), bool)
    key_mask[1, -2:] = False
    bias = layers.attention_bias(key_mask, causal_T=T if causal else None, dtype="float64")
    gate = rng.uniform(0.2, 1.0, H)
    R = rng.normal(size=(B, T, d))
    out, c = layers.mha_forward(xq, xkv, p, bias, H, gate)
    assert np.all(c["A"][1, :, :, -2:] == 0), "padded keys get no attention"
    if causal:
        assert np.all(np.triu(c["A"][0, 0], 1) == 0), "no attention to the future"
    dxq, dxkv, g, dgate = layers.mha_backward(R, c)
    names = ["Wq", "bq", "Wk", "bk", "Wv", "bv", "Wo", "bo"]

    def ref(xq, xkv, gate, *ws):
        return anp.sum(_mha_reference(xq, xkv, dict(zip(names, ws)), bias, H, gate) * R)
    ag = autograd.grad(ref, tuple(range(3 + len(names))))(xq, xkv, gate, *[p[n] for n in names])
    f = lambda: np.sum(layers.mha_forward(xq, xkv, p, bias, H, gate)[0] * R)
    check("dxq", dxq, f, xq, ag[0])
    check("dxkv", dxkv, f, xkv, ag[1])
    check("dgate", dgate, f, gate, ag[2])
    for n, a in zip(names, ag[3:]):
        if n == "bk":   # softmax is shift-invariant per query row, so dL/dbk = 0 exactly
            assert np.abs(g[n]).max() < 1e-12 and np.abs(numerical_grad(f, p[n])).max() < 1e-8
            continue
        check(n, g[n], f, p[n], a)
    assert np.allclose(out, _mha_reference(xq, xkv, p, bias, H, gate)), "forward equals the per-head formula"


def test_dropout_mask_draws_16_bits_per_element():
    """m / (1 - p16), m = [u >= round(p 2^16)] for u the 16-bit words of the generator's raw 64-bit stream
    (four elements per draw): the values are 0 and 1 / (1 - p16), the drop rate is p16 = round(p 2^16) / 2^16,
    and the generator advances by exactly ceil(n / 4) draws (so a checkpointed state resumes the same masks)."""
    p, shape = 0.1, (37, 11)                 # n = 407: not a multiple of 4
    n, thr = 37 * 11, round(0.1 * 2 ** 16)
    m = layers.dropout_mask(shape, p, np.random.default_rng(3), "float64")
    u = np.random.default_rng(3).bit_generator.random_raw(-(-n // 4)).view(np.uint16)[:n].reshape(shape)
    assert np.array_equal(m, (u >= thr) / (1 - thr / 2 ** 16))
    g1, g2 = np.random.default_rng(4), np.random.default_rng(4)
    layers.dropout_mask(shape, p, g1, "float32")
    g2.bit_generator.random_raw(-(-n // 4))
    assert g1.bit_generator.state == g2.bit_generator.state
    big = layers.dropout_mask((1000, 1000), p, np.random.default_rng(5), "float32")
    assert big.dtype == np.float32
    assert abs((big == 0).mean() - thr / 2 ** 16) < 2e-3 and abs(big.mean() - 1.0) < 2e-3, "E[mask] = 1"


def test_row_reductions_match_numpy(rng):
    """_row_max (column by column for rows of <= 32), _row_sum, _row_dot and _col_sum equal NumPy's max / sum."""
    for k in (1, 5, 32, 33, 200):
        x = rng.normal(size=(3, 4, k))
        assert np.array_equal(layers._row_max(x), x.max(-1, keepdims=True)), k
        assert np.allclose(layers._row_sum(x), x.sum(-1, keepdims=True), rtol=1e-12, atol=1e-12)
        assert np.allclose(layers._row_dot(x, 2 * x), (2 * x * x).sum(-1, keepdims=True), rtol=1e-12)
        assert np.allclose(layers._col_sum(x.reshape(-1, k)), x.reshape(-1, k).sum(0), rtol=1e-12)
    x = np.array([[-np.inf, -1e9, 3.0], [2.0, 2.0, -0.0]])
    assert np.array_equal(layers._row_max(x), np.array([[3.0], [2.0]]))


def test_in_place_forwards_equal_the_out_of_place_ones(rng, monkeypatch):
    """The in-place branches (taken on plain arrays) compute bit for bit what the out-of-place ones (taken
    under autograd, or with layers.INPLACE off) compute: linear, LayerNorm, softmax, cross-entropy, dropout."""
    x, W, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(4, 5)), rng.normal(size=5)
    g, s = rng.normal(size=4), rng.normal(size=(2, 3, 6))
    bias = np.where(rng.random((2, 1, 6)) < 0.3, layers.NEG_INF, 0.0)
    z, y, m = rng.normal(size=(6, 9)), rng.integers(0, 9, 6), np.array([1, 1, 0, 1, 1, 0], bool)

    def run():
        return [layers.linear_forward(x, W, b)[0], layers.layernorm_forward(x, g, b[:4])[0],
                layers.softmax_forward(s, bias)[0], *layers.xent_forward(z, y, m, 0.1)[:2],
                layers.dropout_forward(x.copy(), 0.3, np.random.default_rng(0), inplace=True)[0]]
    fast = run()
    monkeypatch.setattr(layers, "INPLACE", False)
    slow = run()
    for a, c in zip(fast, slow):
        assert np.array_equal(a, c)


def test_in_place_variants_equal_the_allocating_ones(rng):
    """The ``inplace=True`` forms that the training step uses (softmax forward, LayerNorm backward,
    cross-entropy forward and backward) give bit for bit the numbers of the allocating forms, and
    really reuse the array they are handed (so the training step allocates less and stays the same)."""
    s = rng.normal(size=(2, 3, 4, 6)).astype(np.float32)
    bias = np.where(rng.random((2, 1, 1, 6)) < 0.3, layers.NEG_INF, 0.0).astype(np.float32)
    p_ref = layers.softmax_forward(s, bias)[0]
    s2 = s.copy()
    p = layers.softmax_forward(s2, bias, inplace=True)[0]
    assert p is s2 and np.array_equal(p, p_ref)

    x, g, b = (rng.normal(size=sh).astype(np.float32) for sh in ((2, 5, 8), (8,), (8,)))
    _, cache = layers.layernorm_forward(x, g, b)
    dy = rng.normal(size=x.shape).astype(np.float32)
    ref = layers.layernorm_backward(dy, cache)
    dy2 = dy.copy()
    got = layers.layernorm_backward(dy2, cache, inplace=True)
    assert got[0] is dy2 and all(np.array_equal(a, c) for a, c in zip(got, ref))

    z, y, m = rng.normal(size=(6, 9)).astype(np.float32), rng.integers(0, 9, 6), np.array([1, 1, 0, 1, 1, 0], bool)
    loss_ref, nll_ref, c_ref = layers.xent_forward(z, y, m, 0.1)
    d_ref = layers.xent_backward(c_ref)
    z2 = z.copy()
    loss, nll, c = layers.xent_forward(z2, y, m, 0.1, inplace=True)
    assert c[0] is z2 and loss == loss_ref and nll == nll_ref
    d = layers.xent_backward(c, inplace=True)
    assert d is z2 and np.array_equal(d, d_ref)
