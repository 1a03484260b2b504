"""Layer-wise relevance propagation (LRP) through the encoder-decoder, from the forward caches.

Voita et al. 2019, sec. 4, after Ding et al. 2017 ("Visualizing and Understanding Neural Machine
Translation"): relevance starts at the top-1 logit of every real target position (teacher forcing),
total 1 per position, and flows back layer by layer to the source and target embeddings. The relevance
of a head is the relevance of its output neurons (``Z``, before the gate and W^O), summed.

Every rule maps the relevance ``R`` of a layer's output to that of its input(s), using the forward
values held in the caches; rules are small named functions in :data:`RULES`, chosen by name:

    linear       "epsilon" (default; eps = 0 is Ding et al.'s z-rule) | "alphabeta"
    residual     "epsilon": R_x = x / y R_y, R_f = f / y R_y | "alphabeta"
    layernorm    "linear" (default: std held constant, then the linear rule) | "identity"
    attention    "values" (default: weights held constant, Ali et al. 2022 AH-rule) | "full"
    elementwise  "identity"  (ReLU, the head gate)
    embedding    "sum"       (relevance of a token = sum over d)

The ``linear`` choice is a family: with "alphabeta" the residual split, the LayerNorm map and the value
path of attention use their alpha-beta versions too (see :class:`Rules`). With the default
alpha = beta = 0.5 ("sum" convention) every transition weight is >= 0, so relevance stays >= 0; the
epsilon family is signed and, on trained models, can put large cancelling relevances on the heads.

Relevance arrays may carry extra LEADING axes in front of the activation's shape (one per starting
position for ``per_position=True``); every rule broadcasts over them, so the same code serves both.
Denominators come from the forward pass (no recomputation), so LRP-0/epsilon are linear in the starting
relevance.

Conservation: a rule whose ``z`` includes a bias hands the bias its share, and that share is lost, so
the total is conserved exactly only with every bias and LayerNorm beta zero (and eps = 0); the
positional encoding is an input, so it keeps its share (reported apart from the token embedding).
"""
import time
from dataclasses import dataclass, field

from . import backend
from .backend import xp
from .errors import MiniheadError
from .layers import sinusoidal_positions

KINDS = ("enc", "dec_self", "dec_enc")
DEFAULT_EPS = 1e-6


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


def _tot(R, n_act):
    """Total relevance per sentence (and per leading index): sum over the activation axes after the
    batch axis. R (*lead, B, ...) with ``n_act`` activation axes (B included) -> (*lead, B)."""
    if R is None:
        return 0.0
    return R.sum(axis=tuple(range(R.ndim - n_act + 1, R.ndim)))


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
    sum_ = lambda a: a.sum(-1, keepdims=True)                # noqa: E731
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


RULES = {
    "linear": {"epsilon": linear_epsilon, "alphabeta": linear_alphabeta},
    "residual": {"epsilon": residual_proportional, "alphabeta": residual_alphabeta},
    "layernorm": {"linear": layernorm_linear, "linear_alphabeta": layernorm_alphabeta,
                  "identity": layernorm_identity},
    "attention": {"values": attention_values, "values_alphabeta": attention_values_alphabeta,
                  "full": attention_full},
    "elementwise": {"identity": elementwise_identity},
    "embedding": {"sum": embedding_sum},
}


# --------------------------------------------------------------------------- options
@dataclass
class Rules:
    """Which rules of :data:`RULES` are used, and their constants.

    ``linear`` picks the family: "epsilon" (default; eps = 1e-6 only keeps z = 0 from dividing by zero,
    eps = 0 is the paper's z-rule) or "alphabeta" (the official code's alpha = beta = 0.5 with convention
    "sum"; alpha=2, beta=1, convention="difference" for Bach et al. / zennit). The family applies to
    every linear-in-the-input operation: linear layers, the residual split, the LayerNorm map
    (``layernorm="linear"``, default; or "identity") and the value path of attention
    (``attention="values"``, default, weights constant). ``attention="full"`` also feeds queries and keys
    (its internal splits always use the epsilon rule); ``value_share`` is its value-branch share."""
    linear: str = "epsilon"
    layernorm: str = "linear"
    attention: str = "values"
    eps: float = DEFAULT_EPS
    alpha: float = 0.5
    beta: float = 0.5
    convention: str = "sum"
    value_share: float = 0.5
    fallback: bool = True

    def __post_init__(self):
        for kind, names in (("linear", RULES["linear"]), ("layernorm", ("linear", "identity")),
                            ("attention", ("values", "full"))):
            if getattr(self, kind) not in names:
                raise LRPError(f"unknown {kind} rule {getattr(self, kind)!r}; choose one of {sorted(names)}")
        if self.eps < 0:
            raise LRPError(f"eps must be >= 0, got {self.eps}")
        if not 0.0 <= self.value_share <= 1.0:
            raise LRPError(f"value_share must lie in [0, 1], got {self.value_share}")
        if self.convention not in ("sum", "difference"):
            raise LRPError(f"alpha-beta convention must be 'sum' or 'difference', got {self.convention!r}")

    @property
    def _ab(self):
        return dict(alpha=self.alpha, beta=self.beta, convention=self.convention, eps=self.eps,
                    fallback=self.fallback)

    def lin(self, x, W, b, z, R):
        if self.linear == "epsilon":
            return linear_epsilon(x, W, b, z, R, self.eps)
        return linear_alphabeta(x, W, b, z, R, **self._ab)

    def ln(self, x, y, c_ln, R, b=None):
        xc, xhat, rstd, g = c_ln
        if self.layernorm == "identity":
            return layernorm_identity(x, y, rstd, g, R)
        if self.linear == "epsilon":
            return layernorm_linear(x, y, rstd, g, R, self.eps)
        return layernorm_alphabeta(x, y, rstd, g, R, b, **self._ab)

    def res(self, x, f, R):
        if self.linear == "epsilon":
            return residual_proportional(x, f, R, self.eps)
        return residual_alphabeta(x, f, R, **self._ab)

    def attn(self, A, Q, K, V, Z, scale, R):
        if self.attention == "full":
            return attention_full(A, Q, K, V, Z, scale, R, self.eps, self.value_share)
        if self.linear == "epsilon":
            return attention_values(A, Q, K, V, Z, scale, R, self.eps)
        return attention_values_alphabeta(A, Q, K, V, Z, scale, R, **self._ab)


# --------------------------------------------------------------------------- result
@dataclass
class Relevance:
    """What :func:`relevance` returns. Without per-position starts the arrays are as listed; with
    ``per_position=True`` an axis T0 (the starting target position) is inserted after B everywhere:
    head (L, B, T0, H), src (B, T0, S), totals (B, T0) ...

    head[kind]      (L, B, H)  relevance of each head's output neurons Z (before gate and W^O), summed
                               over query positions and dh; kinds "enc", "dec_self", "dec_enc"
    sublayer[kind]  (L, B)     relevance of the attention sublayer's output (before the residual add)
    src, tgt        (B, S), (B, T)  relevance reaching the input x0 = sqrt(d) E[token] + PE, summed over d
    src_token, tgt_token       the part of it that the token embedding takes (the rest went to PE)
    totals          stage -> (B,)  all relevance still alive after each stage (conservation checks)
    full[kind]      list over layers of (B, H, Tq, dh) relevance tensors, if ``keep_full``
    n_start         (B,)       number of starting positions (real target tokens) per sentence
    """
    head: dict
    sublayer: dict
    src: object
    tgt: object
    src_token: object
    tgt_token: object
    totals: dict
    n_start: object
    full: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- propagation
def _check_eval(cache):
    for side in ("enc", "dec"):
        c = cache[side]
        if c["emb"]["drop"] is not None or any(
                sl["drop"] is not None or sl["f"].get("drop") is not None
                for layer in c["layers"] for sl in layer.values()):
            raise LRPError("lrp: the forward cache has dropout masks; run model.forward with rng=None")


def _to_heads(R, H):
    """(*lead, B, T, d) -> (*lead, B, H, T, dh)."""
    d = R.shape[-1]
    return R.reshape(R.shape[:-1] + (H, d // H)).swapaxes(-2, -3)


def _from_heads(R):
    """(*lead, B, H, T, dh) -> (*lead, B, T, d)."""
    R = R.swapaxes(-2, -3)
    return R.reshape(R.shape[:-2] + (R.shape[-2] * R.shape[-1],))


def _mha_relprop(R_out, c, fx, p, rules):
    """Relevance through one multi-head attention (W^O, gate, attention core, W^Q/W^K/W^V).

    R_out (*lead, B, Tq, d) on the attention output fx (= concat W^O + b^O). Returns (R_Z per head
    (*lead, B, H, Tq, dh), R to the query input, R to the key/value input)."""
    H = c["H"]
    R_cat = rules.lin(c["concat"], c["o"][1], p["bo"], fx, R_out)         # (*lead, B, Tq, d)
    R_Z = elementwise_identity(_to_heads(R_cat, H))                      # (*lead, B, H, Tq, dh) gate
    R_Q, R_K, R_V = rules.attn(c["A"], c["Q"], c["K"], c["V"], c["Z"], c["scale"], R_Z)
    x_kv = c["v"][0]
    R_kv = rules.lin(x_kv, c["v"][1], p["bv"], _from_heads(c["V"]), _from_heads(R_V))  # (*lead, B, Tk, d)
    R_q = 0.0
    if R_Q is not None:
        R_q = rules.lin(c["q"][0], c["q"][1], p["bq"], _from_heads(c["Q"]), _from_heads(R_Q))
        R_kv = R_kv + rules.lin(x_kv, c["k"][1], p["bk"], _from_heads(c["K"]), _from_heads(R_K))
    return R_Z, R_q, R_kv


def _ffn_relprop(R_out, c, fx, p, rules):
    """FFN relu(h W1 + b1) W2 + b2: linear rule, identity through ReLU, linear rule."""
    R_a = rules.lin(c["lin2"][0], c["lin2"][1], p["b2"], fx, R_out)       # (*lead, B, T, d_ff)
    R_h = elementwise_identity(R_a)
    return rules.lin(c["lin1"][0], c["lin1"][1], p["b1"], c["h"], R_h)    # (*lead, B, T, d)


def _sub(params, prefix):
    n = len(prefix) + 1
    return {k[n:]: v for k, v in params.items() if k.startswith(prefix + ".")}


def _sublayer_relprop(R_y, sl, core, params, cfg, rules):
    """Relevance through a residual sublayer; ``core(R_fx, fx) -> (R_h, extra)`` handles f.

    pre-norm y = x + f(LN(x)): residual rule, then f, then the LayerNorm rule; post-norm
    y = LN(x + f(x)): LayerNorm rule, residual rule, then f. Returns (R_x, extra, R_fx)."""
    x, fx = sl["x"], sl["fx"]
    if cfg.pre_norm:
        R_x, R_fx = rules.res(x, fx, R_y)
        R_h, extra = core(R_fx, fx)
        h = _ln_out(sl)                                      # (B, T, d) LN output = f's input
        return R_x + rules.ln(x, h, sl["ln"], R_h, params[sl["ln_name"] + ".b"]), extra, R_fx
    xc, xhat, rstd, g = sl["ln"]
    y = xhat * g + params[sl["ln_name"] + ".b"]              # (B, T, d) sublayer output
    R_r = rules.ln(x + fx, y, sl["ln"], R_y, params[sl["ln_name"] + ".b"])
    R_x, R_fx = rules.res(x, fx, R_r)
    R_h, extra = core(R_fx, fx)
    return R_x + R_h, extra, R_fx


def _ln_out(sl):
    """The LayerNorm output that fed f (pre-norm): the input of f's first linear layer."""
    cf = sl["f"]
    return cf["q"][0] if "q" in cf else cf["lin1"][0]


def _stack_input(c_emb):
    """x0 = e + PE, the input of a stack (dropout off)."""
    e = c_emb["e"]                                           # (B, T, d)
    return e + sinusoidal_positions(e.shape[1], e.shape[2], e.dtype)[None]


def _stack_top(side_cache):
    """The input of a stack's final LayerNorm: the last sublayer's output (or x0 without layers)."""
    if not side_cache["layers"]:
        return _stack_input(side_cache["emb"])
    last = side_cache["layers"][-1]["ffn"]
    return last["x"] + last["fx"]


def _start(cache, params, cfg, tgt_mask, rules, starts):
    """Relevance at the decoder output y from the top-1 logit of each real position.

    ``starts`` is None (all positions at once, R_logit = 1 on every real position) or a list of
    positions t0 (one leading axis: R_logit[t0, b, t] = [t == t0] [real]). The output layer is run
    through the linear rule with one output unit per row (a batched (d, 1) weight), so the (B, T, V)
    relevance array is never built."""
    y = cache["dec_out"]                                     # (B, T, d)
    B, T, d = y.shape
    logits = cache["logits"]                                 # (B, T, V)
    top = logits.argmax(-1)                                  # (B, T)
    z = xp.take_along_axis(logits, top[..., None], -1)       # (B, T, 1) top-1 logit (bias included)
    if cfg.shared_embeddings:
        w, bsel = params["emb"][top], None                   # (B, T, d)
    else:
        w, bsel = params["out.W"].T[top], params["out.b"][top].reshape(B * T, 1, 1)  # (B, T, d)
    real = tgt_mask.astype(y.dtype)                          # (B, T)
    if starts is None:
        R0 = real                                            # (B, T)
    else:
        R0 = (xp.arange(T)[None, :] == xp.asarray(starts)[:, None]).astype(y.dtype)  # (P, T)
        R0 = R0[:, None, :] * real[None]                     # (P, B, T)
    lead = R0.shape[:-2]
    N = B * T
    R_y = rules.lin(y.reshape(N, 1, d), w.reshape(N, d, 1), bsel, z.reshape(N, 1, 1),
                    R0.reshape(lead + (N, 1, 1)))            # (*lead, N, 1, d)
    return R0, R_y.reshape(lead + (B, T, d))


def _propagate(params, cfg, cache, tgt_mask, rules, starts, keep_full):
    """One backward relevance pass; returns the pieces of a :class:`Relevance` (T0 still leading)."""
    R0, R = _start(cache, params, cfg, tgt_mask, rules, starts)
    totals = {"logits": _tot(R0, 2), "dec_out": _tot(R, 3)}
    head = {k: [None] * cfg.n_layers(k) for k in KINDS}
    sub_tot = {k: [None] * cfg.n_layers(k) for k in KINDS}
    full = {k: [None] * cfg.n_layers(k) for k in KINDS} if keep_full else {}

    def note(kind, l, R_Z, R_fx):
        head[kind][l] = R_Z.sum(axis=(-1, -2))               # (*lead, B, H)
        sub_tot[kind][l] = R_fx.sum(axis=(-1, -2))           # (*lead, B)
        if keep_full:
            full[kind][l] = R_Z

    def attn_core(cl, name, p, cross):
        """f = attention; extra = (R_Z, R to the encoder output or None)."""
        def core(R_fx, fx):
            R_Z, R_q, R_kv = _mha_relprop(R_fx, cl[name]["f"], fx, p, rules)
            return (R_q, (R_Z, R_kv)) if cross else (R_q + R_kv, (R_Z, None))
        return core

    def ffn_core(cl, p):
        return lambda R_fx, fx: (_ffn_relprop(R_fx, cl["ffn"]["f"], fx, p, rules), None)

    # decoder, top down; R_enc collects what the cross-attentions send to the encoder output
    dc, enc = cache["dec"], cache["enc_out"]
    if cfg.pre_norm:
        R = rules.ln(_stack_top(dc), cache["dec_out"], dc["ln"], R, params["dec_ln.b"])
        totals["dec_ln"] = _tot(R, 3)
    R_enc = None
    for l in reversed(range(cfg.n_dec_layers)):
        cl = dc["layers"][l]
        R, _, _ = _sublayer_relprop(R, cl["ffn"], ffn_core(cl, _sub(params, f"dec{l}.ffn")), params, cfg, rules)
        totals[f"dec{l}.ffn"] = _tot(R, 3) + _tot(R_enc, 3)
        core = attn_core(cl, "cross", _sub(params, f"dec{l}.cross"), True)
        R, (R_Z, R_kv), R_fx = _sublayer_relprop(R, cl["cross"], core, params, cfg, rules)
        note("dec_enc", l, R_Z, R_fx)
        R_enc = R_kv if R_enc is None else R_enc + R_kv
        totals[f"dec{l}.cross"] = _tot(R, 3) + _tot(R_enc, 3)
        core = attn_core(cl, "self", _sub(params, f"dec{l}.self"), False)
        R, (R_Z, _), R_fx = _sublayer_relprop(R, cl["self"], core, params, cfg, rules)
        note("dec_self", l, R_Z, R_fx)
        totals[f"dec{l}.self"] = _tot(R, 3) + _tot(R_enc, 3)
    tgt, tgt_tok = _embedding_relprop(R, dc["emb"], rules)  # (*lead, B, T)
    if R_enc is None:                                        # no decoder layers: nothing reaches enc
        R_enc = xp.zeros(R.shape[:-3] + enc.shape, dtype=enc.dtype)
    totals["tgt_emb"] = _tot(tgt, 2) + _tot(R_enc, 3)

    # encoder, top down
    ec = cache["enc"]
    R = R_enc
    if cfg.pre_norm:
        R = rules.ln(_stack_top(ec), enc, ec["ln"], R, params["enc_ln.b"])
        totals["enc_ln"] = _tot(R, 3) + _tot(tgt, 2)
    for l in reversed(range(cfg.n_enc_layers)):
        cl = ec["layers"][l]
        R, _, _ = _sublayer_relprop(R, cl["ffn"], ffn_core(cl, _sub(params, f"enc{l}.ffn")), params, cfg, rules)
        totals[f"enc{l}.ffn"] = _tot(R, 3) + _tot(tgt, 2)
        core = attn_core(cl, "self", _sub(params, f"enc{l}.self"), False)
        R, (R_Z, _), R_fx = _sublayer_relprop(R, cl["self"], core, params, cfg, rules)
        note("enc", l, R_Z, R_fx)
        totals[f"enc{l}.self"] = _tot(R, 3) + _tot(tgt, 2)
    src, src_tok = _embedding_relprop(R, ec["emb"], rules)
    totals["src_emb"] = _tot(src, 2) + _tot(tgt, 2)
    return R0, head, sub_tot, src, tgt, src_tok, tgt_tok, totals, full


def _embedding_relprop(R, c_emb, rules):
    """x0 = e + PE: the residual rule splits R between token embedding and positional encoding; both
    relevances summed over d per token (the embedding rule). Returns (R_x0, R_token), (*lead, B, T)."""
    e = c_emb["e"]                                           # (B, T, d)
    pe = sinusoidal_positions(e.shape[1], e.shape[2], e.dtype)[None]  # (1, T, d)
    R_e, _ = rules.res(e, pe, R)
    return embedding_sum(R), embedding_sum(R_e)


def relevance(params, cfg, batch, per_position=False, chunk=None, keep_full=False, gates=None,
              **rule_options):
    """LRP of one batch under teacher forcing (evaluation mode, no dropout); returns :class:`Relevance`.

    ``per_position=False`` (default) starts relevance 1 at every real target position at once, so the
    head relevances are the SUM over positions (one backward pass, cheap); ``per_position=True`` starts
    each position on its own (an extra axis T0, the paper-exact input to per-position normalisation),
    ``chunk`` starting positions per pass (memory x chunk; default all T at once). ``rule_options`` go to
    :class:`Rules` (linear, layernorm, attention, eps, alpha, beta, convention, value_share, fallback)."""
    from . import model
    rules = rule_options.pop("rules", None) or Rules(**rule_options)
    logits, cache = model.forward(params, cfg, batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask,
                                  gates=gates, rng=None)
    cache["logits"] = logits
    _check_eval(cache)
    tgt_mask = xp.asarray(batch.tgt_mask)
    if not per_position:
        parts = _propagate(params, cfg, cache, tgt_mask, rules, None, keep_full)
        return _result(parts, lead=False)
    T = logits.shape[1]
    step = T if chunk is None else int(chunk)
    if step < 1:
        raise LRPError(f"chunk must be a positive number of positions, got {chunk}")
    pieces = [_propagate(params, cfg, cache, tgt_mask, rules, list(range(t, min(t + step, T))), keep_full)
              for t in range(0, T, step)]
    cat = lambda arrs: xp.concatenate(arrs, axis=0)          # noqa: E731  along T0 (leading)
    R0 = cat([p[0] for p in pieces])
    head = {k: [cat([p[1][k][l] for p in pieces]) for l in range(cfg.n_layers(k))] for k in KINDS}
    sub_tot = {k: [cat([p[2][k][l] for p in pieces]) for l in range(cfg.n_layers(k))] for k in KINDS}
    arrays = [cat([p[i] for p in pieces]) for i in (3, 4, 5, 6)]
    totals = {s: cat([p[7][s] for p in pieces]) for s in pieces[0][7]}
    full = ({k: [cat([p[8][k][l] for p in pieces]) for l in range(cfg.n_layers(k))] for k in KINDS}
            if keep_full else {})
    return _result((R0, head, sub_tot, *arrays, totals, full), lead=True)


def _result(parts, lead):
    """Stack layers and move the starting-position axis T0 behind B."""
    R0, head, sub_tot, src, tgt, src_tok, tgt_tok, totals, full = parts
    mv = (lambda a: xp.moveaxis(a, 0, 1)) if lead else (lambda a: a)

    def stack(lst, n_act):
        if not lst:
            return xp.zeros((0,))
        a = xp.stack(lst)                                    # (L, *lead, B, ...)
        return xp.moveaxis(a, 1, 2) if lead else a
    return Relevance(
        head={k: stack(v, 2) for k, v in head.items()},
        sublayer={k: stack(v, 1) for k, v in sub_tot.items()},
        src=mv(src), tgt=mv(tgt), src_token=mv(src_tok), tgt_token=mv(tgt_tok),
        totals={s: mv(v) for s, v in totals.items()},
        n_start=R0.sum(axis=tuple(range(R0.ndim - 2)) + (R0.ndim - 1,)),
        full={k: [mv(a) for a in v] for k, v in full.items()})


# --------------------------------------------------------------------------- speed
def bench_relevance(params, cfg, batches, repeats=3, **options):
    """Measured cost of the relevance pass over ``batches`` relative to a training-style forward plus
    backward pass (model.loss_and_grads, no dropout) over the same batches: best-of-``repeats`` time
    of each, returned as t_relevance / t_forward_backward (a float). ``options`` go to :func:`relevance`."""
    from . import model
    batches = list(batches)

    def fb():
        acc = 0.0
        for b in batches:
            acc += float(model.loss_and_grads(params, cfg, b)[0])   # float() syncs a GPU
        return acc

    def rel():
        acc = 0.0
        for b in batches:
            acc += float(relevance(params, cfg, b, **options).src.sum())
        return acc

    def best(fn):
        times = []
        for _ in range(max(1, repeats)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)
    fb()                                                     # warm-up (allocator, BLAS threads)
    return best(rel) / best(fb)
