"""Layers with hand-written backprop, CS231n style.

Each ``*_forward`` returns ``(out, cache)``; each ``*_backward`` takes the upstream gradient and that
cache and returns the input gradient(s) followed by the parameter gradients. The test suite runs the very
same forward code under autograd.numpy as an oracle, so a forward writes into an array only through
:func:`_owned` (an array the function itself just made, and not an autograd box): under autograd every
forward is out-of-place, on NumPy/CuPy it saves an allocation and a pass. Backward passes are never traced
and update their own fresh arrays in place freely. ``inplace=True`` hands a function an array that its caller
owns and no longer needs (the scores of the softmax, the logits of the cross-entropy, a LayerNorm's upstream
gradient), which it then overwrites with the same operations in the same order. Row sums over the model width are matrix-vector
products (one BLAS call, threaded) instead of ufunc reductions. Shapes: B batch, T (Tq, Tk) time, d model
width, H heads, dh = d / H, V vocabulary.
"""
import functools
import math

from . import backend, kernels
from .backend import xp

NEG_INF = -1e9  # additive mask value; exp() of it is exactly 0 in float32 and float64
INPLACE = True  # False forces the out-of-place forward everywhere (the tests compare both paths)


def _owned(a):
    """True when ``a``, an array the caller has just created, may be updated in place: it is a plain
    array of the active backend (autograd's traced values are boxes, not arrays) and INPLACE is on."""
    return INPLACE and isinstance(a, xp.ndarray)


def _row_sum(x):
    """sum over the last axis, keepdims: x (..., k) -> (..., 1), as one matrix-vector product (on a GPU one
    reduction kernel: no vector of ones to make and fill first)."""
    if backend.name == "cupy":
        return x.sum(-1, keepdims=True)
    return (x @ xp.ones(x.shape[-1], dtype=x.dtype))[..., None]


def _row_max(x):
    """max over the last axis, keepdims: (..., k) -> (..., 1). NumPy reduces a short last axis slowly
    (~85 ns a row: 0.46 ms for the (96, 4, 14, 14) attention scores), so rows of up to 32 take a running
    maximum column by column instead (0.04 ms; exact, as max does not depend on the order)."""
    k = x.shape[-1]
    if k > 32 or not _owned(x) or backend.name != "numpy":   # on a GPU, one reduction kernel, not k launches
        return x.max(-1, keepdims=True)
    m = x[..., 0:1].copy()                                   # (..., 1)
    for j in range(1, k):
        xp.maximum(m, x[..., j:j + 1], out=m)
    return m


def _row_dot(a, b):
    """sum over the last axis of a * b, keepdims, without the (..., k) temporary: (..., k) -> (..., 1)."""
    if backend.name == "cupy":                               # CuPy's einsum costs ~0.4 ms of Python a call
        return (a * b).sum(-1, keepdims=True)
    return xp.einsum("...k,...k->...", a, b)[..., None]


def _col_sum(x2):
    """sum over the rows: x2 (N, k) -> (k,), as one vector-matrix product (one reduction kernel on a GPU)."""
    if backend.name == "cupy":
        return x2.sum(0)
    return xp.ones(x2.shape[0], dtype=x2.dtype) @ x2


# --------------------------------------------------------------------------- linear
def linear_forward(x, W, b):
    """y = x W + b.  x (..., din), W (din, dout), b (dout,)."""
    x2 = x.reshape(-1, x.shape[-1])                          # (N, din): one GEMM, not a batch of small ones
    y = x2 @ W                                               # (N, dout)
    if _owned(y):
        y += b
    else:
        y = y + b
    return y.reshape(x.shape[:-1] + (W.shape[1],)), (x, W)   # (..., dout)


def linear_backward(dy, cache):
    """dx = dy W^T, dW = sum_n x_n^T dy_n, db = sum_n dy_n."""
    x, W = cache
    x2 = x.reshape(-1, x.shape[-1])                          # (N, din)
    dy2 = dy.reshape(-1, dy.shape[-1])                       # (N, dout)
    dx = (dy2 @ W.T).reshape(x.shape)                        # (..., din)
    return dx, x2.T @ dy2, _col_sum(dy2)


# --------------------------------------------------------------------------- embeddings
def embedding_forward(ids, E, scale=1.0):
    """y = scale * E[ids].  ids (B, T) int, E (V, d)."""
    y = E[ids] * scale                                       # (B, T, d)
    return y, (ids, E.shape, scale)


def embedding_backward(dy, cache):
    """dE[v] = scale * sum over positions with ids == v of dy."""
    ids, shape, scale = cache
    dE = xp.zeros(shape, dtype=dy.dtype)                     # (V, d)
    backend.scatter_add(dE, ids.reshape(-1), dy.reshape(-1, shape[1]) * scale)
    return dE


def sinusoidal_positions(T, d, dtype="float32"):
    """PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(...) (Vaswani et al. 2017, sec. 3.5).
    Made once per (T, d, dtype) and array module (a constant: callers never write into it)."""
    return _positions(T, d, str(dtype), xp.module.__name__)


@functools.lru_cache(maxsize=256)
def _positions(T, d, dtype, module_name):
    pos = xp.arange(T, dtype="float64")[:, None]             # (T, 1)
    inv = xp.exp(-math.log(10000.0) * xp.arange(0, d, 2, dtype="float64") / d)  # (d/2,)
    ang = pos * inv                                          # (T, d/2)
    pe = xp.stack([xp.sin(ang), xp.cos(ang)], axis=-1).reshape(T, -1)[:, :d]  # (T, d)
    return pe.astype(dtype)


# --------------------------------------------------------------------------- layer norm
def layernorm_forward(x, g, b, eps=1e-6):
    """y = g * (x - mean) / sqrt(var + eps) + b over the last axis (Ba et al. 2016)."""
    if kernels.active():
        return kernels.layernorm_forward(x, g, b, eps)     # the same, one kernel on a GPU
    inv_d = 1.0 / x.shape[-1]
    mu = _row_sum(x) * inv_d                                 # (..., 1)
    xc = x - mu                                              # (..., d)
    var = _row_dot(xc, xc) * inv_d                           # (..., 1)
    rstd = 1.0 / xp.sqrt(var + eps)                          # (..., 1)
    xhat = xc * rstd                                         # (..., d)
    y = xhat * g                                             # (..., d)
    if _owned(y):
        y += b
    else:
        y = y + b
    return y, (xc, xhat, rstd, g)


def layernorm_backward(dy, cache, inplace=False):
    """dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = g dy; dg = sum dy xhat; db = sum dy.

    Computed as dx = rstd dxhat - xhat (rstd mean(dxhat xhat)) - rstd mean(dxhat), in place.
    ``inplace=True``: ``dy`` is the caller's own fresh array and becomes dx (dg and db are taken first)."""
    if kernels.active():
        return kernels.layernorm_backward(dy, cache, inplace and _owned(dy))
    xc, xhat, rstd, g = cache
    d = xhat.shape[-1]
    dy2 = dy.reshape(-1, d)                                  # (N, d)
    dg = xp.einsum("nd,nd->d", dy2, xhat.reshape(-1, d))     # (d,) sum dy xhat, no temporary
    db = _col_sum(dy2)                                       # (d,)
    dxhat = xp.multiply(dy, g, out=dy) if inplace and _owned(dy) else dy * g  # (..., d)
    m1 = _row_sum(dxhat) * (rstd / d)                        # (..., 1) rstd mean(dxhat)
    m2 = _row_dot(dxhat, xhat) * (rstd / d)                  # (..., 1) rstd mean(dxhat xhat)
    dx = dxhat
    dx *= rstd
    t = xhat * m2                                            # (..., d)
    dx -= t
    dx -= m1                                                 # (..., d)
    return dx, dg, db


# --------------------------------------------------------------------------- element-wise
def relu_forward(x):
    """y = max(x, 0)."""
    y = xp.maximum(x, 0)
    return y, x > 0


def relu_backward(dy, cache):
    """dx = dy * [x > 0]."""
    return dy * cache


DROP_BITS = 16  # dropout draws 16 random bits per element (four per 64-bit output of the generator)


def dropout_mask(shape, p, rng, dtype):
    """The inverted-dropout multiplier m / (1 - p16), m ~ Bernoulli(1 - p16), drawn from the seeded host ``rng``.

    Each element takes 16 bits u of the generator's raw 64-bit stream (four elements per draw) and is kept
    when u >= round(p 2^16); so the drop rate is p16 = round(p 2^16) / 2^16 (0.0999908 for p = 0.1) and the
    scale 1 / (1 - p16) keeps E[m / (1 - p16)] = 1 exactly. Host draw: same seed, same mask on any backend
    (little-endian hosts); the generator state advances by ceil(n / 4) draws, so checkpoints resume exactly."""
    if kernels.active():
        return kernels.dropout_mask(shape, p, rng, dtype, DROP_BITS)  # the same mask, drawn on the GPU
    n = math.prod(shape)
    thr = round(p * 2 ** DROP_BITS)
    u = rng.bit_generator.random_raw((n + 3) // 4).view("uint16")[:n].reshape(shape)  # host, uniform 0..65535
    keep = backend.to_device(u >= thr)                       # (shape) bool
    mask = keep.astype(dtype)                                # (shape)
    mask *= 1.0 / (1.0 - thr / 2 ** DROP_BITS)
    return mask


def dropout_forward(x, p, rng, inplace=False):
    """Inverted dropout: y = x * m / (1 - p), m ~ Bernoulli(1 - p) (see :func:`dropout_mask`).

    With ``p == 0`` or ``rng is None`` (evaluation) it is the identity and the cache is None.
    ``inplace=True``: the caller hands over ``x`` (nothing else holds it), which is then scaled in place."""
    if p <= 0 or rng is None:
        return x, None
    mask = dropout_mask(x.shape, p, rng, x.dtype)            # (same as x)
    if inplace and _owned(x):
        x *= mask
        return x, mask
    return x * mask, mask


def dropout_backward(dy, mask):
    """dx = dy * m / (1 - p)."""
    return dy if mask is None else dy * mask


def residual_forward(x, fx):
    """y = x + f(x): the residual connection."""
    return x + fx, None


def residual_backward(dy, cache):
    """Both branches receive the upstream gradient unchanged: dx = dy, dfx = dy."""
    return dy, dy


# --------------------------------------------------------------------------- softmax and loss
def softmax_forward(s, bias=None, inplace=False):
    """p = exp(s + bias - max) / sum exp(...) over the last axis; ``bias`` is 0 or NEG_INF (masking).

    ``inplace=True``: the caller hands over ``s`` (nothing else holds it), which then becomes p (the same
    operations in the same order, without the two temporaries)."""
    if kernels.active():
        return kernels.softmax_forward(s, bias, inplace and _owned(s))
    if inplace and _owned(s):
        if bias is not None:
            s += bias                                        # (..., K) s + bias
        s -= _row_max(s)                                     # (..., K) stabilised
        e = xp.exp(s, out=s)                                 # (..., K)
        e /= _row_sum(e)
        return e, e
    if bias is not None:
        s = s + bias
    z = s - _row_max(s)                                      # (..., K) stabilised
    if _owned(z):
        e = xp.exp(z, out=z)                                 # (..., K)
        e /= _row_sum(e)
        return e, e
    e = xp.exp(z)                                            # (..., K)
    p = e / _row_sum(e)                                      # (..., K)
    return p, p


def softmax_backward(dp, p):
    """ds = p * (dp - sum_k dp_k p_k)."""
    if kernels.active():
        return kernels.softmax_backward(dp, p)
    t = dp - _row_dot(dp, p)                                 # (..., K)
    t *= p
    return t


def log_softmax(s):
    """log p = s - logsumexp(s) over the last axis."""
    z = s - s.max(-1, keepdims=True)                         # (..., V)
    return z - xp.log(xp.exp(z).sum(-1, keepdims=True))      # (..., V)


def xent_forward(logits, targets, mask, smoothing=0.0, inplace=False, n_norm=None):
    """Label-smoothed cross-entropy averaged over real (unmasked) tokens (Szegedy et al. 2016).

    q = (1 - eps) onehot(y) + eps / V;  loss = sum_n m_n (-sum_v q_nv log p_nv) / sum_n m_n.
    ``n_norm`` replaces the denominator sum_n m_n (a shard of a batch is averaged over the whole batch's
    real tokens, so the shards' losses and gradients sum to the batch's: :mod:`minihead.shards`).
    logits (N, V), targets (N,) int, mask (N,) bool. Returns (loss, nll_sum, cache); ``nll_sum`` is the
    unsmoothed negative log-likelihood summed over real tokens (for perplexity and reporting).
    With z = logits - max and lse = log sum_v exp z_v: -log p_ny = lse_n - z_ny and
    -mean_v log p_nv = lse_n - mean_v z_nv, so log p itself is never built; the cache keeps exp z.
    ``inplace=True``: the caller hands over ``logits`` (nothing else holds it), which then becomes exp z
    (the same operations, without a second (N, V) array: the output layer's are the largest of a step)."""
    if kernels.active():
        return kernels.xent_forward(logits, targets, mask, smoothing, inplace and _owned(logits), n_norm)
    N, V = logits.shape
    if inplace and _owned(logits):
        z = logits
        z -= logits.max(-1, keepdims=True)                   # (N, V)
    else:
        z = logits - logits.max(-1, keepdims=True)           # (N, V)
    z_mean = _row_sum(z)[:, 0] * (1.0 / V)                   # (N,)
    nll_minus_lse = -z[xp.arange(N), targets]                # (N,) -z_ny
    e = xp.exp(z, out=z) if _owned(z) else xp.exp(z)         # (N, V) exp z
    se = _row_sum(e)[:, 0]                                   # (N,)
    lse = xp.log(se)                                         # (N,)
    w = mask.astype(logits.dtype)                            # (N,)
    n_real = xp.maximum(w.sum(), 1.0) if n_norm is None else n_norm
    nll = lse + nll_minus_lse                                # (N,) -log p_ny
    smooth = lse - z_mean                                    # (N,) = -sum_v (1/V) log p_v
    per_tok = (1.0 - smoothing) * nll + smoothing * smooth   # (N,)
    loss = (per_tok * w).sum() / n_real
    return loss, (nll * w).sum(), (e, se, targets, w, n_real, smoothing)


def xent_backward(cache, inplace=False):
    """dlogits_n = m_n (softmax(logits_n) - q_n) / sum m, softmax = exp z / sum exp z.

    ``inplace=True``: the cache's exp z (read by nothing else) becomes dlogits, so the cache is spent."""
    if kernels.active():
        return kernels.xent_backward(cache, inplace)
    e, se, targets, w, n_real, smoothing = cache
    N, V = e.shape
    wn = w / n_real                                          # (N,)
    if inplace and _owned(e):
        d = e
        d *= (wn / se)[:, None]                              # (N, V) m_n softmax / sum m
    else:
        d = e * (wn / se)[:, None]                           # (N, V) m_n softmax / sum m
    d -= (wn * (smoothing / V))[:, None]                     # the uniform part of q
    d[xp.arange(N), targets] -= wn * (1.0 - smoothing)       # the one-hot part of q
    return d


# --------------------------------------------------------------------------- feed-forward
def ffn_forward(x, p, drop, rng):
    """FFN(x) = relu(x W1 + b1) W2 + b2, dropout after the ReLU (as in tensor2tensor)."""
    h, c1 = linear_forward(x, p["W1"], p["b1"])              # (B, T, d_ff)
    a, cr = relu_forward(h)                                  # (B, T, d_ff)
    a_d, cd = dropout_forward(a, drop, rng, inplace=True)    # (B, T, d_ff)
    y, c2 = linear_forward(a_d, p["W2"], p["b2"])            # (B, T, d)
    return y, {"lin1": c1, "relu": cr, "drop": cd, "lin2": c2, "h": h, "a": a_d}


def ffn_backward(dy, c):
    da_d, dW2, db2 = linear_backward(dy, c["lin2"])
    if c["drop"] is not None:
        da_d *= c["drop"]                                    # dropout backward, in place (da_d is fresh)
    dh = da_d
    dh *= c["relu"]                                          # ReLU backward, in place: dx = dy [x > 0]
    dx, dW1, db1 = linear_backward(dh, c["lin1"])
    return dx, {"W1": dW1, "b1": db1, "W2": dW2, "b2": db2}


# --------------------------------------------------------------------------- attention
def attention_bias(key_mask, causal_T=None, dtype="float32"):
    """Additive mask (B, 1, Tq|1, Tk): NEG_INF on padded keys and, if causal, on future positions."""
    bias = xp.where(key_mask[:, None, None, :], 0.0, NEG_INF).astype(dtype)  # (B, 1, 1, Tk)
    if causal_T is not None:
        fut = xp.triu(xp.ones((causal_T, causal_T), dtype=bool), k=1)         # (T, T) True above diagonal
        bias = bias + xp.where(fut, NEG_INF, 0.0).astype(dtype)[None, None]  # (B, 1, T, T)
    return bias


def _merge_heads(x):
    """(B, H, T, dh) -> (B, T, H dh): the heads side by side (concat_h)."""
    B, H, T, dh = x.shape
    return x.transpose((0, 2, 1, 3)).reshape(B, T, H * dh)


def _merged_matmul(a, b):
    """The per-head product a @ b, (B, H, T, dh), and the same numbers with the heads merged, (B, T, H dh).
    On plain arrays the product is written straight into the merged layout (``out=`` a transposed view of
    a (B, T, H, dh) buffer), so the merge costs no transpose copy; under autograd (and on CuPy, whose matmul
    into a strided ``out`` is untested here) it is a @ b, then merged."""
    if not (_owned(a) and _owned(b)) or backend.name != "numpy":
        r = a @ b
        return r, _merge_heads(r)
    B, H, T, dh = a.shape[0], a.shape[1], a.shape[2], b.shape[-1]
    buf = xp.empty((B, T, H, dh), dtype=xp.result_type(a, b))   # (B, T, H, dh)
    r = xp.matmul(a, b, out=buf.transpose((0, 2, 1, 3)))       # (B, H, T, dh) view of buf
    return r, buf.reshape(B, T, H * dh)


def mha_forward(xq, xkv, p, bias, n_heads, gate=None, attn_drop=0.0, rng=None, kv=None):
    """Multi-head scaled dot-product attention (Vaswani et al. 2017, eq. 1 and sec. 3.2.2).

    head_h = softmax(Q_h K_h^T / sqrt(dh) + bias) V_h;  out = concat_h(g_h head_h) W^O + b^O.
    xq (B, Tq, d), xkv (B, Tk, d); ``gate`` (H,) multiplies each head's output before W^O (Voita et
    al. 2019, sec. 6). All heads in batched matrix products. The cache exposes, for analysis, ``A`` the
    attention weights (B, H, Tq, Tk) and ``Z`` each head's output before gating and W^O (B, H, Tq, dh).
    ``kv``: precomputed (K, V) of ``xkv`` from :func:`mha_keys_values` (decoding only; no backward)."""
    B, Tq, d = xq.shape
    H, dh = n_heads, d // n_heads
    q, cq = linear_forward(xq, p["Wq"], p["bq"])              # (B, Tq, d)
    Q = q.reshape(B, Tq, H, dh).transpose((0, 2, 1, 3))        # (B, H, Tq, dh)
    if kv is None:
        (K, Vh), (ck, cv) = mha_keys_values(xkv, p, n_heads, with_cache=True)  # (B, H, Tk, dh) each
    else:
        (K, Vh), ck, cv = kv, None, None
    scale = 1.0 / math.sqrt(dh)
    S = Q @ K.transpose((0, 1, 3, 2))                        # (B, H, Tq, Tk)
    if _owned(S):
        S *= scale
    else:
        S = S * scale
    A, _ = softmax_forward(S, bias, inplace=True)            # (B, H, Tq, Tk), S is ours
    A_d, c_drop = dropout_forward(A, attn_drop, rng)         # (B, H, Tq, Tk)
    if gate is None:
        Z, concat = _merged_matmul(A_d, Vh)                  # (B, H, Tq, dh) head outputs, (B, Tq, d)
    else:
        Z = A_d @ Vh                                         # (B, H, Tq, dh) head outputs
        concat = _merge_heads(Z * gate[None, :, None, None])  # (B, Tq, d)
    out, co = linear_forward(concat, p["Wo"], p["bo"])        # (B, Tq, d)
    cache = {"q": cq, "k": ck, "v": cv, "Q": Q, "K": K, "V": Vh, "A": A, "drop": c_drop, "A_d": A_d,
             "Z": Z, "gate": gate, "concat": concat, "o": co, "scale": scale, "H": H}
    return out, cache


def mha_keys_values(xkv, p, n_heads, with_cache=False):
    """K, V of multi-head attention, (B, H, Tk, dh) each: k = xkv W^K + b^K, v = xkv W^V + b^V, split by head."""
    B, Tk, d = xkv.shape
    dh = d // n_heads
    k, ck = linear_forward(xkv, p["Wk"], p["bk"])             # (B, Tk, d)
    v, cv = linear_forward(xkv, p["Wv"], p["bv"])             # (B, Tk, d)
    K = k.reshape(B, Tk, n_heads, dh).transpose((0, 2, 1, 3))  # (B, H, Tk, dh)
    Vh = v.reshape(B, Tk, n_heads, dh).transpose((0, 2, 1, 3))  # (B, H, Tk, dh)
    return ((K, Vh), (ck, cv)) if with_cache else (K, Vh)


def mha_backward(dout, c):
    """Backward of :func:`mha_forward`. Returns (dxq, dxkv, grads, dgate); dgate is None without a gate."""
    H, scale, gate = c["H"], c["scale"], c["gate"]
    B, Tq, d = dout.shape
    dh = d // H
    dconcat, dWo, dbo = linear_backward(dout, c["o"])        # (B, Tq, d)
    dZg = dconcat.reshape(B, Tq, H, dh).transpose((0, 2, 1, 3))  # (B, H, Tq, dh)
    if gate is None:
        dZ, dgate = dZg, None
    else:
        dZ = dZg * gate[None, :, None, None]                 # (B, H, Tq, dh)
        dgate = (dZg * c["Z"]).sum(axis=(0, 2, 3))           # (H,)
    dA_d = dZ @ c["V"].transpose((0, 1, 3, 2))                 # (B, H, Tq, Tk)
    dV, dv = _merged_matmul(c["A_d"].transpose((0, 1, 3, 2)), dZ)  # (B, H, Tk, dh), (B, Tk, d)
    dA = dropout_backward(dA_d, c["drop"])                   # (B, H, Tq, Tk)
    dS = softmax_backward(dA, c["A"])                        # (B, H, Tq, Tk)
    dS *= scale
    dQ, dq = _merged_matmul(dS, c["K"])                      # (B, H, Tq, dh), (B, Tq, d)
    dK, dk = _merged_matmul(dS.transpose((0, 1, 3, 2)), c["Q"])  # (B, H, Tk, dh), (B, Tk, d)
    dxq, dWq, dbq = linear_backward(dq, c["q"])
    dxk, dWk, dbk = linear_backward(dk, c["k"])
    dxv, dWv, dbv = linear_backward(dv, c["v"])
    grads = {"Wq": dWq, "bq": dbq, "Wk": dWk, "bk": dbk, "Wv": dWv, "bv": dbv, "Wo": dWo, "bo": dbo}
    dxk += dxv
    return dxq, dxk, grads, dgate
