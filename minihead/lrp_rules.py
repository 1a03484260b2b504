"""The relevance rules of layer-wise relevance propagation (LRP): pure functions, one per layer type and rule
family, registered in :data:`RULES` (layer type -> family -> function), which is what :class:`minihead.lrp.Rules`
dispatches through. The propagation driver is :mod:`minihead.lrp`; every rule has a deliberately slow textbook
twin written with explicit loops in :mod:`minihead.lrp_reference` (the tests and chapter 2 compare them).

Rule families (the ``linear`` option of :class:`minihead.lrp.Rules`):

    "z"         the paper's rule (Voita et al. 2019, appendix A, after Ding et al. 2017): for v = sum_u W_uv u, u
                receives W_uv u / sum_u' W_u'v u' of v's relevance; the bias is not an input, so it takes no share
                (at a residual y = x + f, neither does the output bias of f: :func:`residual_z`) and relevance
                is conserved exactly; products split in proportion to the factors, non-linearities
                passed unchanged (ReLU, the head gate; the softmax weights are held constant).
    "official"  the-story-of-heads (lib/layers/lrp.py): alpha = beta = 0.5 on the impacts z_ij = J_ji x_i +
                f(0)_j / n_in (the bias, or LayerNorm's beta, spread evenly over the inputs), eps = 1e-5 in the
                normalisers, then each layer's input relevance rescaled to the output's total |R| (per token row;
                per sentence and head in attention).
    "epsilon"   Bach et al. 2015's epsilon rule with the bias in the denominator (the bias's share is lost).
    "alphabeta" alpha-beta with the bias in z+ / z- (its share lost), optional fallback for one-signed outputs.

Relevance arrays may carry extra LEADING axes in front of the activation's shape (one per starting position);
every rule broadcasts over them.
"""
import inspect

from .backend import xp
from .errors import MiniheadError

DEFAULT_EPS = 1e-6          # the epsilon / alpha-beta families' stabiliser
OFFICIAL_EPS = 1e-5         # the official code's LRP.eps
FAMILIES = ("z", "official", "epsilon", "alphabeta")


class LRPError(MiniheadError, ValueError):
    """A cache or an option that relevance propagation cannot use."""


# --------------------------------------------------------------------------- helpers
def _stab_div(R, z, eps):
    """R / (z + eps sign(z)) with sign(0) = +1; where the denominator is exactly 0 the ratio is 0.

    The z = 0 case (an output that is exactly zero, e.g. an all-zero padded input with eps = 0) would
    otherwise give 0/0; the relevance sent to such an output is dropped (it cannot be split)."""
    if eps > 0:                                              # never zero: |denominator| >= eps
        return R / xp.where(z >= 0, z + eps, z - eps)
    zero = z == 0
    return xp.where(zero, 0.0, R / xp.where(zero, 1.0, z))  # python scalars keep z's dtype


def _swap(W):
    return W.swapaxes(-1, -2)


def _mm(a, W):
    """a @ W; for a 2-D W as ONE (N, k) x (k, m) GEMM (NumPy's stacked matmul against a transposed
    2-D view is ~3x slower than the flattened product)."""
    if W.ndim != 2:
        return a @ W
    return (a.reshape(-1, a.shape[-1]) @ W).reshape(a.shape[:-1] + (W.shape[1],))


# --------------------------------------------------------------------------- linear rules
def linear_epsilon(x, W, b, z, R, eps=DEFAULT_EPS):
    """Epsilon rule (Bach et al. 2015, eq. 58; Ding et al. 2017 with eps = 0):

        R_i = sum_j x_i w_ij R_j / (z_j + eps sign(z_j)),   z_j = sum_i x_i w_ij + b_j.

    ``z`` is the layer's forward output (bias INCLUDED, so the bias absorbs the share b_j / z_j of R_j,
    which is lost); pass ``z=None`` to compute it from x, W, b. ``W`` may be batched (..., din, dout).
    Shapes: x (..., din), R (*lead, ..., dout) -> (*lead, ..., din)."""
    if z is None:
        z = x @ W if b is None else x @ W + b
    s = _stab_div(R, z, eps)                                 # (*lead, ..., dout)
    return x * _mm(s, _swap(W))                              # (*lead, ..., din)


def _ab_weights(zpos, zneg, R, alpha, beta, convention, eps, fallback):
    """Per-output multipliers (u+, u-) of the alpha-beta family: R_i = sum_j z+_ij u+_j + z-_ij u-_j.

    u+ = a R / z+, u- = b R / z- with (a, b) = (alpha, beta) ("sum") or (alpha, -beta) ("difference").
    ``fallback`` (only for "sum"): an output with no positive part (z+ = 0) hands ALL its relevance,
    (alpha + beta) R, to the negative part and vice versa, instead of losing that share."""
    if convention not in ("sum", "difference"):
        raise LRPError(f"alpha-beta convention must be 'sum' or 'difference', got {convention!r}")
    a, b = (alpha, beta) if convention == "sum" else (alpha, -beta)
    if convention == "sum" and fallback:
        no_pos = (zpos == 0).astype(zpos.dtype)              # (..., dout) one-signed outputs
        no_neg = (zneg == 0).astype(zpos.dtype)
        a, b = alpha + beta * no_neg - alpha * no_pos, beta + alpha * no_pos - beta * no_neg
    if eps > 0:                                              # signs known: z+ >= 0 >= z-
        return R * (a / (zpos + eps)), R * (b / (zneg - eps))
    return a * _stab_div(R, zpos, 0.0), b * _stab_div(R, zneg, 0.0)


def linear_alphabeta(x, W, b, z, R, alpha=0.5, beta=0.5, convention="sum", eps=DEFAULT_EPS, fallback=True):
    """Alpha-beta rule: positive and negative contributions z_ij = x_i w_ij normalised apart.

        "sum" (the-story-of-heads lib/layers/lrp.py, default alpha = beta = 0.5, alpha + beta = 1):
            R_i = sum_j (alpha z+_ij / z+_j + beta z-_ij / z-_j) R_j
        "difference" (Bach et al. 2015 eq. 60 and zennit's AlphaBeta, alpha - beta = 1, e.g. 2, 1):
            R_i = sum_j (alpha z+_ij / z+_j - beta z-_ij / z-_j) R_j
    with z+_j = sum_i max(z_ij, 0) + max(b_j, 0) and z-_j likewise with min: the bias takes its share of
    each part and that share is lost. Each output's relevance is conserved when alpha + beta = 1 ("sum")
    or alpha - beta = 1 ("difference"), up to the bias share and eps (added to |z+|, |z-|), except that an
    output with contributions of one sign only loses the other share; with ``fallback`` ("sum" only, the
    default) that share goes to the side that exists (the official code instead rescales each layer's
    total). With "sum", alpha, beta >= 0, every transition weight is >= 0: positive relevance stays
    positive. Vectorised through (x w)+ = x+ w+ + x- w- and (x w)- = x+ w- + x- w+ (no (din, dout)
    tensor); ``z`` is unused (kept for the common signature). ``W`` may be batched (..., din, dout)."""
    xpos, xneg = xp.maximum(x, 0), xp.minimum(x, 0)          # (..., din)
    Wpos, Wneg = xp.maximum(W, 0), xp.minimum(W, 0)          # (din, dout)
    X = xp.concatenate([xpos, xneg], -1)                     # (..., 2 din): both signs in one GEMM
    zpos = _mm(X, xp.concatenate([Wpos, Wneg], -2))          # (..., dout) >= 0
    zneg = _mm(X, xp.concatenate([Wneg, Wpos], -2))          # (..., dout) <= 0
    if b is not None:
        zpos, zneg = zpos + xp.maximum(b, 0), zneg + xp.minimum(b, 0)
    upos, uneg = _ab_weights(zpos, zneg, R, alpha, beta, convention, eps, fallback)  # (*lead, ..., dout)
    U = xp.concatenate([upos, uneg], -1)                     # (*lead, ..., 2 dout)
    return (xpos * _mm(U, _swap(xp.concatenate([Wpos, Wneg], -1)))   # (*lead, ..., din)
            + xneg * _mm(U, _swap(xp.concatenate([Wneg, Wpos], -1))))


def residual_proportional(x, f, R, eps=DEFAULT_EPS):
    """Residual y = x + f: each branch gets its share, R_x = x / y R_y, R_f = f / y R_y (Ding et al.
    2017's rule for a sum; the-story-of-heads relprop_add). Conserves: R_x + R_f = R_y (up to eps)."""
    s = _stab_div(R, x + f, eps)                             # (*lead, ..., d)
    return x * s, f * s


def layernorm_linear(x, y, rstd, g, R, eps=DEFAULT_EPS):
    """LayerNorm y = g (x - mean x) rstd + b with rstd held constant (Ali et al. 2022, "LN-rule"): a
    linear map y_j = sum_i x_i M_ij + b_j, M_ij = rstd g_j (delta_ij - 1/d), and the epsilon rule on it:

        R_i = x_i rstd (g_i s_i - (1/d) sum_j g_j s_j),   s_j = R_j / (y_j + eps sign y_j).

    z_j = y_j includes beta, so beta takes its share (lost). x (..., d), y (..., d), rstd (..., 1)."""
    s = _stab_div(R, y, eps) * g                             # (*lead, ..., d)
    return x * rstd * (s - s.mean(-1, keepdims=True))        # (*lead, ..., d)


def layernorm_identity(x, y, rstd, g, R, eps=DEFAULT_EPS):
    """LayerNorm as the identity, R_x = R_y: conserves exactly, bias or not (the normalisation is
    treated as an element-wise rescaling whose relevance passes unchanged)."""
    return R


def residual_alphabeta(x, f, R, alpha=0.5, beta=0.5, convention="sum", eps=DEFAULT_EPS, fallback=True):
    """Residual y = x + f under the alpha-beta rule (each element is a sum of two contributions x, f):
    R_x = (a x+ / (x+ + f+) + b x- / (x- + f-)) R_y, likewise R_f; (a, b) as in :func:`linear_alphabeta`."""
    xpos, xneg, fpos, fneg = xp.maximum(x, 0), xp.minimum(x, 0), xp.maximum(f, 0), xp.minimum(f, 0)
    upos, uneg = _ab_weights(xpos + fpos, xneg + fneg, R, alpha, beta, convention, eps, fallback)
    return xpos * upos + xneg * uneg, fpos * upos + fneg * uneg


def layernorm_alphabeta(x, y, rstd, g, R, b=None, alpha=0.5, beta=0.5, convention="sum", eps=DEFAULT_EPS,
                        fallback=True):
    """LayerNorm with rstd held constant (the linear map M_ij = rstd g_j (delta_ij - 1/d)) under the
    alpha-beta rule, contributions z_ij = x_i M_ij, i.e. x_i c_j off the diagonal (c_j = -rstd g_j / d)
    and x_j D_j on it (D_j = rstd g_j (1 - 1/d)); beta ``b`` (the LN bias) in z+ / z- as for a linear
    layer. Vectorised with S+- = sum_i x_i^+-:  sum_{i != j} (x_i c_j)+ = c_j+ (S+ - x_j+) + c_j- (S- - x_j-)."""
    d = x.shape[-1]
    xpos, xneg = xp.maximum(x, 0), xp.minimum(x, 0)          # (..., d)
    c = -rstd * g / d                                        # (..., d) off-diagonal factor
    D = rstd * g * (1.0 - 1.0 / d)                           # (..., d) diagonal factor
    cpos, cneg = xp.maximum(c, 0), xp.minimum(c, 0)
    Spos, Sneg = xpos.sum(-1, keepdims=True), xneg.sum(-1, keepdims=True)  # (..., 1)
    diag = x * D                                             # (..., d) z_jj
    zpos = cpos * (Spos - xpos) + cneg * (Sneg - xneg) + xp.maximum(diag, 0)  # (..., d)
    zneg = cneg * (Spos - xpos) + cpos * (Sneg - xneg) + xp.minimum(diag, 0)
    if b is not None:
        zpos, zneg = zpos + xp.maximum(b, 0), zneg + xp.minimum(b, 0)
    upos, uneg = _ab_weights(zpos, zneg, R, alpha, beta, convention, eps, fallback)  # (*lead, ..., d)
    sum_ = lambda a: a.sum(-1, keepdims=True)
    off = (xpos * (sum_(cpos * upos) - cpos * upos) + xneg * (sum_(cneg * upos) - cneg * upos)
           + xpos * (sum_(cneg * uneg) - cneg * uneg) + xneg * (sum_(cpos * uneg) - cpos * uneg))
    return off + xp.maximum(diag, 0) * upos + xp.minimum(diag, 0) * uneg


def attention_values(A, Q, K, V, Z, scale, R, eps=DEFAULT_EPS, value_share=None):
    """Attention with the weights held constant (Ali et al. 2022, "AH-rule"): Z_q = sum_k A_qk V_k is
    linear in V, so the epsilon rule gives

        R_V[k, c] = V_kc sum_q A_qk R_Z[q, c] / (Z_qc + eps sign Z_qc),   R_Q = R_K = 0.

    A (B, H, Tq, Tk), V (B, H, Tk, dh), Z (B, H, Tq, dh), R (*lead, B, H, Tq, dh). Conserves exactly.
    Returns (R_Q, R_K, R_V) with R_Q = R_K = None."""
    s = _stab_div(R, Z, eps)                                 # (*lead, B, H, Tq, dh)
    return None, None, V * (_swap(A) @ s)                    # (*lead, B, H, Tk, dh)


def attention_values_alphabeta(A, Q, K, V, Z, scale, R, alpha=0.5, beta=0.5, convention="sum",
                               eps=DEFAULT_EPS, fallback=True):
    """Weights held constant, alpha-beta rule on Z_qc = sum_k A_qk V_kc: as A >= 0, the positive part of
    a contribution is A_qk V+_kc, so z+ = A V+, z- = A V-, and R_V = V+ (A^T u+) + V- (A^T u-)."""
    Vpos, Vneg = xp.maximum(V, 0), xp.minimum(V, 0)          # (B, H, Tk, dh)
    upos, uneg = _ab_weights(A @ Vpos, A @ Vneg, R, alpha, beta, convention, eps, fallback)
    At = _swap(A)                                            # (B, H, Tk, Tq)
    return None, None, Vpos * (At @ upos) + Vneg * (At @ uneg)


def attention_full(A, Q, K, V, Z, scale, R, eps=DEFAULT_EPS, value_share=0.5):
    """Attention with relevance through queries and keys as well (the paper's code propagates through
    all of q, k, v; this is a conserving simplification, not its Jacobian-times-input rule):

    1. Z_qc = sum_k A_qk V_kc is bilinear in (A, V); the z-rule on either factor alone hands on all of
       R_Z, so the value branch gets ``value_share`` and the weights the rest:
           R_V[k, c] = w V_kc sum_q A_qk s_qc,   R_A[q, k] = (1 - w) A_qk sum_c V_kc s_qc,
       s = R_Z / (Z + eps sign Z).
    2. Softmax A = exp(S) / sum exp(S): exp is element-wise (relevance passes, as through ReLU) and the
       row normaliser is held constant (as LayerNorm's std), so R_S = R_A.
    3. S_qk = scale sum_c Q_qc K_kc is bilinear again: half to each factor, by the z-rule,
           R_Q[q, c] = 1/2 Q_qc scale sum_k K_kc t_qk,   R_K[k, c] = 1/2 K_kc scale sum_q Q_qc t_qk,
       t = R_S / (S + eps sign S) with S the unmasked scores (masked keys have A = 0, so R_S = 0).
    Every step conserves (up to eps). Returns (R_Q, R_K, R_V) over (*lead, B, H, T, dh)."""
    s = _stab_div(R, Z, eps)                                 # (*lead, B, H, Tq, dh)
    R_V = value_share * V * (_swap(A) @ s)                   # (*lead, B, H, Tk, dh)
    R_S = (1.0 - value_share) * A * (s @ _swap(V))           # (*lead, B, H, Tq, Tk)
    S = (Q @ _swap(K)) * scale                               # (B, H, Tq, Tk) unmasked scores
    t = _stab_div(R_S, S, eps)                               # (*lead, B, H, Tq, Tk)
    R_Q = 0.5 * Q * ((t @ K) * scale)                        # (*lead, B, H, Tq, dh)
    R_K = 0.5 * K * ((_swap(t) @ Q) * scale)                 # (*lead, B, H, Tk, dh)
    return R_Q, R_K, R_V


def elementwise_identity(R):
    """Element-wise functions (ReLU, the per-head gate g_h Z_h): relevance passes unchanged, as in
    Ding et al. 2017 and Bach et al. 2015 (a unit's output depends on its own input only)."""
    return R


def embedding_sum(R):
    """Embedding lookup: the relevance of a token is the sum over its d input neurons (*lead, B, T)."""
    return R.sum(-1)


# --------------------------------------------------------------------------- the paper's z-rule (Ding et al. 2017)
def linear_z(x, W, b, z, R):
    """The weight-ratio rule of Ding et al. 2017 (Voita et al. 2019, appendix A, eq. for v = sum_u W_uv u):

        R_i = sum_j x_i w_ij R_j / sum_i' x_i' w_i'j.

    The bias is not one of the inputs u, so its term is left out of the denominator and sum_i R_i = sum_j R_j
    exactly (an output whose input contributions sum to exactly 0 passes nothing on). ``z`` (the forward output,
    bias included) is unused: the denominator is recomputed as x @ W, which keeps it exact in float32 where a
    large bias would make z - b cancel. ``W`` may be batched (..., din, dout). x (..., din), R (*lead, ..., dout)."""
    zc = _mm(x, W) if W.ndim == 2 else x @ W                 # (..., dout) sum_i x_i w_ij, no bias
    s = _stab_div(R, zc, 0.0)                                # (*lead, ..., dout)
    return x * _mm(s, _swap(W))                              # (*lead, ..., din)


def layernorm_z(x, y, rstd, g, R, b=None):
    """LayerNorm y = g (x - mean x) rstd + b with rstd held constant (a linear map y_j = sum_i x_i M_ij + b_j,
    M_ij = rstd g_j (delta_ij - 1/d)) under the z-rule, beta ``b`` not an input:

        R_i = x_i rstd (g_i s_i - (1/d) sum_j g_j s_j),   s_j = R_j / (y_j - b_j) = R_j / (g_j xhat_j).

    Conserves: sum_i R_i = sum_j R_j (sum_i x_i M_ij = y_j - b_j). The denominator is recomputed from x and rstd
    (no cancellation against b). x, y (..., d), rstd (..., 1), g (d,)."""
    den = g * ((x - x.mean(-1, keepdims=True)) * rstd)       # (..., d) y - b
    s = _stab_div(R, den, 0.0) * g                           # (*lead, ..., d)
    return x * rstd * (s - s.mean(-1, keepdims=True))        # (*lead, ..., d)


def residual_z(x, f, R, f_in=None):
    """Residual y = x + f under the z-rule, where f = f_in + b ends in a linear layer whose bias b is not an input.

    The sublayer output and the skip path are one sum, y_j = x_j + sum_i a_i W_ij + b_j (a: the input of f's last
    linear layer), and the rule for v = sum_u W_uv u (Voita et al. 2019, appendix A) gives each input its share of
    the input terms, the bias none:

        R_x = x / (x + f_in) R_y,   R_f = f_in / (x + f_in) R_y,   f_in = sum_i a_i W_ij = f - b.

    Handed on to f's last linear layer, R_f_j / f_in_j = R_y_j / (x_j + f_in_j) stays bounded; splitting by f
    itself instead (``f_in=None``: R_f = f / y R_y) lets the bias take a share that the linear rule cannot pass on.
    That share is lost where f_in = 0 exactly (a token whose ReLUs are all off: its FFN emits only b2) and
    magnified where f_in is small. No stabiliser; an element with x + f_in = 0 exactly passes nothing on.
    Conserves: R_x + R_f = R_y. x, f, f_in (..., d), R (*lead, ..., d)."""
    return residual_proportional(x, f if f_in is None else f_in, R, eps=0.0)


def attention_values_z(A, Q, K, V, Z, scale, R):
    """Attention with the weights held constant under the z-rule: R_V[k, c] = V_kc sum_q A_qk R_Z[q, c] / Z_qc,
    R_Q = R_K = None (:func:`attention_values` with eps = 0). Conserves exactly."""
    return attention_values(A, Q, K, V, Z, scale, R, eps=0.0)


def attention_full_z(A, Q, K, V, Z, scale, R, value_share=0.5):
    """:func:`attention_full` with eps = 0 (relevance through queries and keys too; conserves exactly)."""
    return attention_full(A, Q, K, V, Z, scale, R, eps=0.0, value_share=value_share)


# --------------------------------------------------------------------------- the official code's variant
def rescale(R_out, *R_in, n_axes=1):
    """The official code's LRP.rescale: multiply the input relevances by sum |R_out| / sum |R_in| (the inputs'
    sums pooled), the sums over the last ``n_axes`` axes (a token row, or (T, dh) of one head), so that every
    row's |relevance| is conserved. The official code adds eps = 1e-5 to the denominator; here a row whose
    inputs carry nothing is left as it is instead, so the rescaled total is exact. Returns one array or a tuple."""
    axes = tuple(range(-n_axes, 0))
    ref = xp.abs(R_out).sum(axis=axes, keepdims=True)        # (*lead, ..., 1 x n_axes)
    tot = sum(xp.abs(r).sum(axis=axes, keepdims=True) for r in R_in)
    zero = tot == 0
    factor = xp.where(zero, 1.0, ref / xp.where(zero, 1.0, tot)).astype(R_out.dtype)
    out = tuple(r * factor for r in R_in)
    return out[0] if len(out) == 1 else out


def official_transitions(Zc, alpha=0.5, beta=0.5, eps=OFFICIAL_EPS):
    """The official code's alpha-beta transition weights from impacts Zc (..., din, dout) (input i -> output j):

        T_ij = alpha z+_ij / (sum_i' z+_i'j + eps) + beta z-_ij / (sum_i' z-_i'j - eps)."""
    pos, neg = xp.maximum(Zc, 0), xp.minimum(Zc, 0)          # (..., din, dout)
    return alpha * pos / (pos.sum(-2, keepdims=True) + eps) + beta * neg / (neg.sum(-2, keepdims=True) - eps)


_OFFICIAL_BLOCK = 2 ** 21   # elements of one block of impacts (rows x din x dout) held at a time


def _official_dense(x, J, c, R, alpha, beta, eps):
    """R_in for impacts Zc_ij = x_i J_ij + c_j / din per token row, J (din, dout) shared or (..., din, dout)
    per row, c (dout,) / (..., dout) or None; then the row rescale. x (..., din), R (*lead, ..., dout)."""
    if xp.ndim(R) == 0:                                      # a scalar 0 (no relevance came this way)
        return x * R
    din, dout = x.shape[-1], R.shape[-1]
    if J.ndim == 2:                                          # one matrix for every row: blocks of rows
        X = x.reshape(-1, din)                               # (N, din)
        N = X.shape[0]
        lead = R.shape[:R.ndim - x.ndim]
        Rf = R.reshape(lead + (N, dout))                     # (*lead, N, dout)
        out = xp.zeros(lead + (N, din), dtype=R.dtype)
        step = max(1, _OFFICIAL_BLOCK // (din * dout))
        cc = 0.0 if c is None else c / din                   # (dout,)
        for n0 in range(0, N, step):
            Zc = X[n0:n0 + step, :, None] * J[None] + cc     # (n, din, dout)
            Tm = official_transitions(Zc, alpha, beta, eps)  # (n, din, dout)
            out[..., n0:n0 + step, :] = (Tm @ Rf[..., n0:n0 + step, :, None])[..., 0]   # (*lead, n, din)
        out = out.reshape(lead + x.shape)
    else:                                                    # one matrix per row: x (..., din), J (..., din, dout)
        cc = 0.0 if c is None else c[..., None, :] / din     # (..., 1, dout)
        Zc = x[..., :, None] * J + cc                        # (..., din, dout)
        out = (official_transitions(Zc, alpha, beta, eps) @ R[..., :, None])[..., 0]    # (*lead, ..., din)
    return rescale(R, out)


def linear_official(x, W, b, z, R, alpha=0.5, beta=0.5, eps=OFFICIAL_EPS):
    """The official code's rule for a linear layer (the-story-of-heads lib/layers/lrp.py, LRP.relprop with
    alpha = beta = 0.5, applied per token row by Dense.relprop): impacts z_ij = x_i w_ij + b_j / din (the bias
    spread evenly over the inputs), then

        R_i = sum_j (alpha z+_ij / (z+_j + eps) + beta z-_ij / (z-_j - eps)) R_j,   z+-_j = sum_i z+-_ij,

    and the row rescaled so that sum_i |R_i| = sum_j |R_j| (:func:`rescale`). ``W`` may be batched: x
    (..., 1, din) with W (..., din, dout) (one matrix per row, the output layer's selected logit). ``z`` unused."""
    if W.ndim == 2:
        return _official_dense(x, W, b, R, alpha, beta, eps)
    bb = None if b is None else xp.broadcast_to(b, W.shape[:-2] + (1, W.shape[-1]))[..., 0, :]  # (..., dout)
    Rr = _official_dense(x[..., 0, :], W, bb, R[..., 0, :], alpha, beta, eps)                     # (*lead, ..., din)
    return Rr[..., None, :]


def residual_official(x, f, R, alpha=0.5, beta=0.5, eps=OFFICIAL_EPS):
    """The official relprop_add: y = x + f element by element (Jacobian identity, f(0) = 0), alpha-beta on the
    two contributions of each element (no fallback), then both rescaled jointly per token row so that
    sum |R_x| + sum |R_f| = sum |R_y| over the row."""
    Rx, Rf = residual_alphabeta(x, f, R, alpha, beta, "sum", eps, fallback=False)
    return rescale(R, Rx, Rf)


def layernorm_official(x, y, rstd, g, R, b=None, alpha=0.5, beta=0.5, eps=OFFICIAL_EPS):
    """The official LayerNorm relprop: impacts z_ij = J_ji x_i + b_j / d with the TRUE Jacobian of LayerNorm at x,

        J_ji = d y_j / d x_i = g_j rstd (delta_ij - 1/d - xhat_i xhat_j / d),

    and its output at zero input, b (beta), spread over the d inputs; alpha-beta and the row rescale as in
    :func:`linear_official`. x, y (..., d), rstd (..., 1), g (d,)."""
    d = x.shape[-1]
    xhat = (x - x.mean(-1, keepdims=True)) * rstd            # (..., d)
    J = rstd[..., None] * g * (xp.eye(d, dtype=x.dtype) - 1.0 / d - xhat[..., :, None] * xhat[..., None, :] / d)
    return _official_dense(x, J, None if b is None else xp.broadcast_to(b, x.shape), R, alpha, beta, eps)


def attention_values_official(A, Q, K, V, Z, scale, R, alpha=0.5, beta=0.5, eps=OFFICIAL_EPS):
    """Weights held constant, the official alpha-beta on Z_qc = sum_k A_qk V_kc (no bias; eps in the
    normalisers, no fallback), then R_V rescaled per sentence and head so that sum |R_V| = sum |R_Z| over
    (T, dh). The official code instead propagates through q, k and v with the full Jacobian of the attention
    core (consider_attn_constant = False); only the value path is kept here. Returns (None, None, R_V)."""
    _, _, RV = attention_values_alphabeta(A, Q, K, V, Z, scale, R, alpha, beta, "sum", eps, fallback=False)
    return None, None, rescale(R, RV, n_axes=2)


def attention_impacts_official(A, Q, K, V, Z, scale):
    """The official code's impacts J x of one attention core Z_qc = sum_k A_qk V_kc, A = softmax_k(scale Q_q . K_k)
    (its _attn_head_jacobian, consider_attn_constant = False; reference input 0 gives output 0, so no bias term).
    With G_qkc = A_qk (V_kc - Z_qc) scale (d Z_qc / d S_qk times the score scale):

        q[q, c'']      contributes  zq[q, c, c'']   = Q_qc'' sum_k G_qkc K_kc''
        k[k, c'']      contributes  zk[q, c, k, c''] = K_kc'' G_qkc Q_qc''
        v[k, c]        contributes  zv[q, c, k]      = A_qk V_kc

    to output Z_qc. Shapes: A (..., Tq, Tk), Q (..., Tq, dh), K, V (..., Tk, dh); returns zq (..., Tq, dh, dh),
    zk (..., Tq, dh, Tk, dh), zv (..., Tq, dh, Tk)."""
    G = A[..., :, :, None] * (V[..., None, :, :] - Z[..., :, None, :]) * scale   # (..., Tq, Tk, dh) [q, k, c]
    zq = xp.einsum("...qkc,...kd->...qcd", G, K) * Q[..., :, None, :]          # (..., Tq, dh, dh)
    zk = (G.swapaxes(-1, -2)[..., :, :, :, None] * K[..., None, None, :, :]
          * Q[..., :, None, None, :])                                           # (..., Tq, dh, Tk, dh)
    zv = A[..., :, None, :] * V.swapaxes(-1, -2)[..., None, :, :]               # (..., Tq, dh, Tk)
    return zq, zk, zv


def attention_full_official(A, Q, K, V, Z, scale, R, alpha=0.5, beta=0.5, eps=OFFICIAL_EPS):
    """The official code's attention rule (the-story-of-heads lib/layers/attn_lrp.py, MultiHeadAttn.relprop with
    consider_attn_constant = False): the impacts of q, k and v on each output Z_qc (:func:`attention_impacts_official`,
    the full Jacobian of the attention core times its input) split by alpha-beta with eps, normalised over ALL
    inputs of that output together,

        R_x = sum_{q, c} (alpha z+_{(q,c) <- x} / (sum z+ + eps) + beta z-_{(q,c) <- x} / (sum z- - eps)) R_Z[q, c],

    then R_Q, R_K, R_V rescaled jointly per sentence and head to sum |R_Z| over (T, dh). One sentence at a time
    (the impacts of one sentence are (H, Tq, dh, Tk, dh)). R (*lead, B, H, Tq, dh). Returns (R_Q, R_K, R_V)."""
    if xp.ndim(R) == 0:
        return Q * R, K * R, V * R
    lead = R.shape[:R.ndim - Z.ndim]
    RQ = xp.zeros(lead + Q.shape, dtype=R.dtype)
    RK = xp.zeros(lead + K.shape, dtype=R.dtype)
    RV = xp.zeros(lead + V.shape, dtype=R.dtype)
    for b in range(A.shape[0]):
        zq, zk, zv = attention_impacts_official(A[b], Q[b], K[b], V[b], Z[b], scale)
        pos = (xp.maximum(zq, 0).sum(-1) + xp.maximum(zk, 0).sum((-1, -2)) + xp.maximum(zv, 0).sum(-1)) + eps
        neg = (xp.minimum(zq, 0).sum(-1) + xp.minimum(zk, 0).sum((-1, -2)) + xp.minimum(zv, 0).sum(-1)) - eps
        Rb = R[..., b, :, :, :]                                                   # (*lead, H, Tq, dh)
        up, un = alpha * Rb / pos, beta * Rb / neg                               # (*lead, H, Tq, dh)

        def spread(z, spec):
            """sum over the outputs (q, c) of z+ up + z- un (an einsum, so no lead-sized copy of z)."""
            return (xp.einsum(spec, up, xp.maximum(z, 0)) + xp.einsum(spec, un, xp.minimum(z, 0)))
        RQ[..., b, :, :, :] = spread(zq, "...hqc,hqcd->...hqd")                  # (*lead, H, Tq, dh)
        RK[..., b, :, :, :] = spread(zk, "...hqc,hqckd->...hkd")                 # (*lead, H, Tk, dh)
        RV[..., b, :, :, :] = spread(zv, "...hqc,hqck->...hkc")                  # (*lead, H, Tk, dh)
    return rescale(R, RQ, RK, RV, n_axes=2)


# --------------------------------------------------------------------------- the registry
RULES = {
    "linear": {"z": linear_z, "official": linear_official, "epsilon": linear_epsilon, "alphabeta": linear_alphabeta},
    "residual": {"z": residual_z, "official": residual_official, "epsilon": residual_proportional,
                 "alphabeta": residual_alphabeta},
    "layernorm": {"z": layernorm_z, "official": layernorm_official, "epsilon": layernorm_linear,
                  "alphabeta": layernorm_alphabeta, "identity": layernorm_identity},
    "attention": {"z": attention_values_z, "official": attention_values_official, "epsilon": attention_values,
                  "alphabeta": attention_values_alphabeta, "full": attention_full, "full_z": attention_full_z,
                  "full_official": attention_full_official},
    "elementwise": {"identity": elementwise_identity},
    "embedding": {"sum": embedding_sum},
}


def call(fn, *args, **consts):
    """Call a registered rule with the constants it takes (its keyword parameters) out of ``consts``; the
    others (eps for the z-rule, alpha for epsilon, ...) are dropped. None values are not passed."""
    names = inspect.signature(fn).parameters
    return fn(*args, **{k: v for k, v in consts.items() if k in names and v is not None})
