"""Deliberately slow textbook twins of the LRP rules of :mod:`minihead.lrp_rules`, and a tiny random model.

Each twin writes its rule as explicit Python loops over inputs i and outputs j, straight from the formula in
the rule's docstring, with no vectorisation trick: the tests (tests/test_lrp.py) and chapter 2 compare the fast
rules with them. They are slow on purpose; use them on a handful of numbers only. Arrays are 2-D (rows n,
features) unless said otherwise; all work on host floats and return backend (xp) arrays.
"""
from types import SimpleNamespace

from . import backend, model
from .backend import xp


def _host(a):
    return None if a is None else backend.to_host(xp.asarray(a))


def _sgn(z):
    return 1.0 if z >= 0 else -1.0


# --------------------------------------------------------------------------- linear layers
def slow_linear_z(x, W, R):
    """Ding et al. 2017 / Voita et al. appendix A: R_i = sum_j x_i w_ij R_j / sum_i' x_i' w_i'j (bias not an
    input; an output whose contributions sum to exactly 0 passes nothing on). x (N, din), W (din, dout)."""
    x, W, R = _host(x), _host(W), _host(R)
    N, din = x.shape
    out = xp.zeros((N, din), dtype="float64")
    for n in range(N):
        for j in range(W.shape[1]):
            den = sum(float(x[n, i] * W[i, j]) for i in range(din))
            if den == 0:
                continue
            for i in range(din):
                out[n, i] += x[n, i] * W[i, j] * R[n, j] / den
    return out


def slow_epsilon(x, W, b, R, eps):
    """Epsilon rule: R_i = sum_j x_i w_ij R_j / (z_j + eps sign z_j), z_j = sum_i x_i w_ij + b_j (a zero
    denominator passes nothing on)."""
    x, W, b, R = _host(x), _host(W), _host(b), _host(R)
    N, din = x.shape
    out = xp.zeros((N, din), dtype="float64")
    for n in range(N):
        for j in range(W.shape[1]):
            z = sum(float(x[n, i] * W[i, j]) for i in range(din)) + float(b[j])
            den = z + eps * _sgn(z)
            if den == 0:
                continue
            for i in range(din):
                out[n, i] += x[n, i] * W[i, j] * R[n, j] / den
    return out


def slow_alphabeta(zc, bias, R, alpha, beta, conv, eps, fallback):
    """Textbook alpha-beta on explicit contributions zc[n, i, j] (input i -> output j), bias[n, j] in z+ / z-:
    R_i = sum_j (a z+_ij / (z+_j + eps) + b z-_ij / (z-_j - eps)) R_j, (a, b) = (alpha, +-beta); with the
    fallback an output with one sign only hands (alpha + beta) R_j to that side."""
    zc, bias, R = _host(zc), _host(bias), _host(R)
    N, I, J = zc.shape
    out = xp.zeros((N, I), dtype="float64")
    s = 1.0 if conv == "sum" else -1.0
    for n in range(N):
        for j in range(J):
            zp = sum(max(float(zc[n, i, j]), 0) for i in range(I)) + max(float(bias[n, j]), 0)
            zn = sum(min(float(zc[n, i, j]), 0) for i in range(I)) + min(float(bias[n, j]), 0)
            a, b = alpha, s * beta
            if fallback and zn == 0:
                a, b = alpha + beta, 0.0
            if fallback and zp == 0:
                a, b = 0.0, alpha + beta
            for i in range(I):
                if zp + eps != 0:
                    out[n, i] += a * max(float(zc[n, i, j]), 0) / (zp + eps) * R[n, j]
                if zn != 0:
                    out[n, i] += b * min(float(zc[n, i, j]), 0) / (zn - eps) * R[n, j]
    return out


def slow_official(zc, R, alpha=0.5, beta=0.5, eps=1e-5):
    """The official code's LRP.relprop on explicit impacts zc[n, i, j] (bias share already inside), then
    LRP.rescale per row n without its eps: R_i = sum_j (alpha z+_ij / (sum_i' z+_i'j + eps) + beta z-_ij /
    (sum_i' z-_i'j - eps)) R_j, then R_i *= sum_j |R_j| / sum_i |R_i|."""
    zc, R = _host(zc), _host(R)
    N, I, J = zc.shape
    out = xp.zeros((N, I), dtype="float64")
    for n in range(N):
        for j in range(J):
            zp = sum(max(float(zc[n, i, j]), 0) for i in range(I)) + eps
            zn = sum(min(float(zc[n, i, j]), 0) for i in range(I)) - eps
            for i in range(I):
                out[n, i] += (alpha * max(float(zc[n, i, j]), 0) / zp
                              + beta * min(float(zc[n, i, j]), 0) / zn) * R[n, j]
        tot_in = sum(abs(float(out[n, i])) for i in range(I))
        tot_out = sum(abs(float(R[n, j])) for j in range(J))
        if tot_in > 0:
            for i in range(I):
                out[n, i] *= tot_out / tot_in
    return out


def slow_linear_official(x, W, b, R, alpha=0.5, beta=0.5, eps=1e-5):
    """Official rule for a linear layer: impacts z_ij = x_i w_ij + b_j / din, then :func:`slow_official`."""
    x, W, b = _host(x), _host(W), _host(b)
    N, din = x.shape
    dout = W.shape[1]
    zc = xp.zeros((N, din, dout), dtype="float64")
    for n in range(N):
        for i in range(din):
            for j in range(dout):
                zc[n, i, j] = x[n, i] * W[i, j] + (0.0 if b is None else b[j] / din)
    return slow_official(zc, R, alpha, beta, eps)


def slow_residual_official(x, f, R, alpha=0.5, beta=0.5, eps=1e-5):
    """Official relprop_add for y = x + f (rows n, elements j): each output element y_j has the two impacts
    x_j and f_j; alpha-beta per element, then the two inputs rescaled jointly per row. Returns (R_x, R_f)."""
    x, f = _host(x), _host(f)
    N, d = x.shape
    zc = xp.zeros((N, 2 * d, d), dtype="float64")            # inputs: x_0..x_{d-1}, f_0..f_{d-1}
    for n in range(N):
        for j in range(d):
            zc[n, j, j] = x[n, j]
            zc[n, d + j, j] = f[n, j]
    out = slow_official(zc, R, alpha, beta, eps)
    return out[:, :d], out[:, d:]


# --------------------------------------------------------------------------- LayerNorm
def _layernorm(x, gain, bias, ln_eps=1e-6):
    """mean, rstd, xhat of each row (the forward of minihead.layers.layernorm_forward)."""
    N, d = x.shape
    mus, rstds = [], []
    for n in range(N):
        mu = sum(float(v) for v in x[n]) / d
        var = sum((float(v) - mu) ** 2 for v in x[n]) / d
        mus.append(mu)
        rstds.append(1.0 / (var + ln_eps) ** 0.5)
    return mus, rstds


def slow_layernorm_z(x, gain, bias, R, ln_eps=1e-6):
    """LayerNorm with rstd held constant, y_j = sum_i x_i M_ij + b_j, M_ij = rstd g_j (delta_ij - 1/d), under the
    z-rule (beta not an input): R_i = sum_j x_i M_ij R_j / sum_i' x_i' M_i'j."""
    x, gain, R = _host(x), _host(gain), _host(R)
    N, d = x.shape
    _, rstds = _layernorm(x, gain, bias, ln_eps)
    out = xp.zeros((N, d), dtype="float64")
    for n in range(N):
        M = [[rstds[n] * gain[j] * ((i == j) - 1.0 / d) for j in range(d)] for i in range(d)]
        for j in range(d):
            den = sum(x[n, i] * M[i][j] for i in range(d))
            if den == 0:
                continue
            for i in range(d):
                out[n, i] += x[n, i] * M[i][j] * R[n, j] / den
    return out


def slow_layernorm_official(x, gain, bias, R, alpha=0.5, beta=0.5, eps=1e-5, ln_eps=1e-6):
    """Official LayerNorm relprop: impacts z_ij = J_ji x_i + b_j / d with the true Jacobian
    J_ji = g_j rstd (delta_ij - 1/d - xhat_i xhat_j / d), then :func:`slow_official`."""
    x, gain, bias = _host(x), _host(gain), _host(bias)
    N, d = x.shape
    mus, rstds = _layernorm(x, gain, bias, ln_eps)
    zc = xp.zeros((N, d, d), dtype="float64")
    for n in range(N):
        xhat = [(float(x[n, i]) - mus[n]) * rstds[n] for i in range(d)]
        for i in range(d):
            for j in range(d):
                J = gain[j] * rstds[n] * ((i == j) - 1.0 / d - xhat[i] * xhat[j] / d)
                zc[n, i, j] = J * x[n, i] + (0.0 if bias is None else bias[j] / d)
    return slow_official(zc, R, alpha, beta, eps)


# --------------------------------------------------------------------------- attention (weights held constant)
def slow_attention_values(A, V, R):
    """z-rule on Z_qc = sum_k A_qk V_kc: R_V[k, c] = sum_q A_qk V_kc R_Z[q, c] / Z_qc, over (B, H, T, dh)."""
    A, V, R = _host(A), _host(V), _host(R)
    B, H, Tq, Tk = A.shape
    out = xp.zeros(V.shape, dtype="float64")
    for b in range(B):
        for h in range(H):
            for q in range(Tq):
                for c in range(V.shape[-1]):
                    Z = sum(float(A[b, h, q, k] * V[b, h, k, c]) for k in range(Tk))
                    if Z == 0:
                        continue
                    for k in range(Tk):
                        out[b, h, k, c] += A[b, h, q, k] * V[b, h, k, c] * R[b, h, q, c] / Z
    return out


def slow_attention_values_official(A, V, R, alpha=0.5, beta=0.5, eps=1e-5):
    """Official alpha-beta on Z_qc = sum_k A_qk V_kc per (sentence, head, channel c), then R_V rescaled per
    (sentence, head) so that sum |R_V| = sum |R_Z| over (T, dh)."""
    A, V, R = _host(A), _host(V), _host(R)
    B, H, Tq, Tk = A.shape
    dh = V.shape[-1]
    out = xp.zeros(V.shape, dtype="float64")
    for b in range(B):
        for h in range(H):
            for c in range(dh):
                zc = xp.zeros((1, Tk, Tq), dtype="float64")
                for k in range(Tk):
                    for q in range(Tq):
                        zc[0, k, q] = A[b, h, q, k] * V[b, h, k, c]
                for k in range(Tk):
                    for q in range(Tq):
                        zp = sum(max(float(zc[0, kk, q]), 0) for kk in range(Tk)) + eps
                        zn = sum(min(float(zc[0, kk, q]), 0) for kk in range(Tk)) - eps
                        out[b, h, k, c] += (alpha * max(float(zc[0, k, q]), 0) / zp
                                            + beta * min(float(zc[0, k, q]), 0) / zn) * R[b, h, q, c]
            tot_in = float(abs(out[b, h]).sum())
            if tot_in > 0:
                out[b, h] *= float(abs(R[b, h]).sum()) / tot_in
    return out


def slow_attention_full_official(A, Q, K, V, scale, R, alpha=0.5, beta=0.5, eps=1e-5):
    """The official attention rule by loops, per (sentence b, head h, output q, c): the impact of every input
    from the Jacobian of Z_qc = sum_k A_qk V_kc, A = softmax(scale Q K^T), written out term by term,
        dZ_qc / dV_kc' = A_qk [c = c'],  dZ_qc / dS_qk = A_qk (V_kc - Z_qc),  S_qk = scale sum_c'' Q_qc'' K_kc'',
    times the input; alpha-beta over all inputs of (q, c) together; then R_Q, R_K, R_V rescaled jointly per
    (b, h). Returns (R_Q, R_K, R_V)."""
    A, Q, K, V, R = (_host(a) for a in (A, Q, K, V, R))
    B, H, Tq, Tk = A.shape
    dh = V.shape[-1]
    RQ, RK, RV = (xp.zeros(a.shape, dtype="float64") for a in (Q, K, V))
    for b in range(B):
        for h in range(H):
            for q in range(Tq):
                for c in range(dh):
                    Zqc = sum(float(A[b, h, q, k] * V[b, h, k, c]) for k in range(Tk))
                    impacts = []                                  # (array name, index, z): one z per input
                    zq = [0.0] * dh                               # q[q, d] acts through every score S_qk
                    for k in range(Tk):
                        dS = float(A[b, h, q, k]) * (float(V[b, h, k, c]) - Zqc)
                        for d in range(dh):
                            zq[d] += dS * scale * float(K[b, h, k, d]) * float(Q[b, h, q, d])
                            impacts.append(("K", (k, d), dS * scale * float(Q[b, h, q, d]) * float(K[b, h, k, d])))
                        impacts.append(("V", (k, c), float(A[b, h, q, k]) * float(V[b, h, k, c])))
                    impacts += [("Q", (q, d), zq[d]) for d in range(dh)]
                    zp = sum(max(z, 0.0) for _, _, z in impacts) + eps
                    zn = sum(min(z, 0.0) for _, _, z in impacts) - eps
                    for name, (i, d), z in impacts:
                        out = {"Q": RQ, "K": RK, "V": RV}[name]
                        out[b, h, i, d] += (alpha * max(z, 0.0) / zp + beta * min(z, 0.0) / zn) * R[b, h, q, c]
            tot_in = float(abs(RQ[b, h]).sum() + abs(RK[b, h]).sum() + abs(RV[b, h]).sum())
            if tot_in > 0:
                f = float(abs(R[b, h]).sum()) / tot_in
                RQ[b, h] *= f
                RK[b, h] *= f
                RV[b, h] *= f
    return RQ, RK, RV


# --------------------------------------------------------------------------- a tiny model for checks
def toy_model(pre_norm=True, shared=True, biases=False, seed=3, layers=2, heads=2):
    """A float64 toy encoder-decoder (vocabulary 23, d_model 8) with random LayerNorm gains; every bias and
    LayerNorm beta random (N(0, 0.1)) if ``biases`` else zero. Returns (cfg, params)."""
    cfg = model.Config(vocab_size=23, n_enc_layers=layers, n_dec_layers=layers, n_heads=heads, d_model=8,
                       d_ff=12, dropout=0.1, shared_embeddings=shared, pre_norm=pre_norm, dtype="float64")
    params = model.init_params(cfg, seed)
    gen = backend.rng(seed + 100)
    for k in params:
        if k.endswith(".g"):
            params[k] = params[k] + backend.to_device(gen.normal(0, 0.3, params[k].shape), "float64")
        elif biases and k.endswith((".b", "b1", "b2", ".bq", ".bk", ".bv", ".bo")):
            params[k] = params[k] + backend.to_device(gen.normal(0, 0.1, params[k].shape), "float64")
    return cfg, params


def toy_batch(gen, V, B=3, S=6, T=5):
    """A random batch of B sentence pairs (ids 4..V-1) with padding: sentence 0 has 4 source tokens, sentence
    2 has 3 target tokens. ``gen``: a host numpy Generator."""
    src = gen.integers(4, V, (B, S))
    src_mask = src >= 0
    src_mask[0, 4:] = False
    src[0, 4:] = 0
    tgt_in = gen.integers(4, V, (B, T))
    tgt_out = gen.integers(4, V, (B, T))
    tgt_mask = tgt_in >= 0
    tgt_mask[2, 3:] = False
    tgt_in[2, 3:] = tgt_out[2, 3:] = 0
    return SimpleNamespace(src=src, src_mask=src_mask, tgt_in=tgt_in, tgt_out=tgt_out, tgt_mask=tgt_mask)
