"""Hard-concrete head gates and their expected-L0 penalty (Voita et al. 2019, sec. 6).

Each attention head's output is multiplied by a gate g in [0, 1] before the output projection W^O.
The gate is a sample of the *hard concrete* distribution of Louizos, Welling & Kingma 2018
("Learning Sparse Neural Networks through L0 Regularization", arXiv 1712.01312, sec. 4):

    s     = sigmoid((log u - log(1 - u) + log_alpha) / beta),   u ~ U(0, 1)      (Louizos eq. 9, 1st line)
    s_bar = s (zeta - gamma) + gamma                                               (stretch, eq. 9)
    g     = clip(s_bar, 0, 1)                                                      (rectify, eq. 9)

Stretching to (gamma, zeta) with gamma < 0 < 1 < zeta and clipping puts real probability mass on g = 0
and g = 1, so a head can be switched off exactly. The expected number of open gates is differentiable:

    P(g != 0) = sigmoid(log_alpha - beta log(-gamma / zeta))                       (Louizos eq. 12)

and the paper trains  loss = cross-entropy + lambda * sum_heads P(g != 0)  (Voita et al. eq. 5-6).
At test time the paper (Voita et al. sec. 6.1) sets each gate to 0 or 1, whichever of P(g = 0) and P(g = 1)
is larger (:meth:`HardConcrete.binary_gate`, the default readout of :mod:`minihead.prune`); the official code
instead drops the noise, g = clip(sigmoid(log_alpha) (zeta - gamma) + gamma, 0, 1) (Louizos eq. 13,
:meth:`HardConcrete.test_gate`, the "continuous" readout), and prunes a head when that is 0, i.e. when
log_alpha <= log(-gamma / zeta). A gate is "settled" when max(P(g = 0), P(g = 1)) > 0.95
(:meth:`HardConcrete.settled`): the paper reports that training converges to gates almost all closed or open.

Defaults follow the official code (github.com/lena-voita/the-story-of-heads, lib/layers/concrete_gate.py):
beta = 0.33 (Louizos et al. use 2/3), gamma = -0.1, zeta = 1.1. Every backward is written by hand; the
derivative of the clip is taken as 0 wherever the value is clipped (as autograd and TensorFlow do).
"""
import math
from dataclasses import dataclass

from . import backend
from .backend import xp
from .errors import MiniheadError

# Initial log_alpha for gates that start open. The official code initialises log_a with TF's default
# glorot-uniform (|log_a| < ~0.6 for 8 heads), which starts every test-time gate near 0.5 and leaves a training
# sample at exactly 0 about 31% of the time; we start the pruning run from a converged model whose heads are all
# on: log_alpha = 3 gives a test-time gate of exactly 1, P(g != 0) = 0.978 and P(g = 1) = 0.90 (defaults).
LOG_ALPHA_OPEN = 3.0

REDUCTIONS = ("sum", "layer_mean")


class GateError(MiniheadError, ValueError):
    """Bad gate hyperparameters, noise outside (0, 1), or an unknown penalty reduction."""


def _sigmoid(x):
    """Logistic function written as exp(-softplus(-x)), so large |x| neither overflows nor warns."""
    return xp.exp(-xp.logaddexp(0.0, -x))  # same shape as x


def _sum_to_shape(grad, shape):
    """Sum a broadcast gradient back to the shape of the parameter it came from (chain rule of broadcasting)."""
    shape = tuple(shape)
    n_lead = grad.ndim - len(shape)
    if n_lead > 0:
        grad = xp.sum(grad, axis=tuple(range(n_lead)))  # drop leading broadcast axes
    keep = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if keep:
        grad = xp.sum(grad, axis=keep, keepdims=True)  # axes that were size 1 in the parameter
    return grad.reshape(shape)


def init_log_alpha(shape, value=LOG_ALPHA_OPEN, dtype=backend.FLOAT_TRAIN):
    """log_alpha filled with ``value`` (default: gates open): shape H for one layer, or (L, H) for L layers."""
    shape = (int(shape),) if isinstance(shape, int) else tuple(int(n) for n in shape)
    if not shape or min(shape) < 1:
        raise GateError(f"init_log_alpha: shape must be H or (L, H) with positive sizes, got {shape}")
    return xp.full(shape, float(value), dtype=dtype)  # (H,) or (L, H)


@dataclass
class HardConcrete:
    """The hard-concrete gate with temperature ``beta`` and stretch interval (``gamma``, ``zeta``).

    Needs beta > 0 and gamma < 0, zeta > 1: only then are P(g = 0) and P(g = 1) positive and the
    L0 formula log(-gamma / zeta) defined (Louizos et al. 2018, sec. 4)."""

    beta: float = 0.33
    gamma: float = -0.1
    zeta: float = 1.1

    def __post_init__(self):
        if not self.beta > 0:
            raise GateError(f"HardConcrete: beta (temperature) must be > 0, got {self.beta}")
        if not (self.gamma < 0 and self.zeta > 1):
            raise GateError(f"HardConcrete: need gamma < 0 and zeta > 1 so that the gate has mass at 0 and 1, "
                            f"got gamma={self.gamma}, zeta={self.zeta}")

    # ---------------------------------------------------------------- training-time sample
    def sample_forward(self, log_alpha, u):
        """One hard-concrete sample per element of ``u`` (Louizos et al. 2018, eq. 9; Voita et al. sec. 6.1).

        log_alpha: (...) gate parameters; u: noise in (0, 1), broadcastable with log_alpha (e.g. (H,) or
        (B, H) for one draw per example). Returns g of the broadcast shape and a cache for the backward."""
        if bool(xp.any(u <= 0)) or bool(xp.any(u >= 1)):
            raise GateError("HardConcrete.sample_forward: u must lie strictly inside (0, 1) "
                            f"(got min {float(xp.min(u))}, max {float(xp.max(u))}); draw it with draw_u")
        logit_u = xp.log(u) - xp.log(1.0 - u)                     # (...) logistic noise
        pre = (logit_u + log_alpha) / self.beta                    # (...) broadcast with log_alpha
        s = _sigmoid(pre)                                          # (...) binary concrete in (0, 1)
        s_bar = s * (self.zeta - self.gamma) + self.gamma          # (...) stretched to (gamma, zeta)
        g = xp.clip(s_bar, 0.0, 1.0)                               # (...) hard concrete in [0, 1]
        cache = (s, s_bar, log_alpha.shape)
        return g, cache

    def sample_backward(self, dg, cache):
        """d loss / d log_alpha from d loss / d g.

        dg/dlog_alpha = 1[0 < s_bar < 1] (zeta - gamma) s (1 - s) / beta, since d sigmoid(x)/dx = s (1 - s)
        and d pre / d log_alpha = 1 / beta; summed over axes along which log_alpha was broadcast."""
        s, s_bar, la_shape = cache
        inside = (s_bar > 0.0) & (s_bar < 1.0)                     # (...) clip passes the gradient only here
        ds_bar = dg * inside                                       # (...)
        ds = ds_bar * (self.zeta - self.gamma)                     # (...)
        dpre = ds * s * (1.0 - s)                                  # (...)
        dlog_alpha = _sum_to_shape(dpre / self.beta, la_shape)    # log_alpha's shape
        return dlog_alpha

    # ---------------------------------------------------------------- expected L0 penalty
    def penalty_forward(self, log_alpha):
        """Elementwise P(g != 0) = sigmoid(log_alpha - beta log(-gamma / zeta)) (Louizos eq. 12).

        Derivation: g = 0 iff s <= -gamma / (zeta - gamma); the CDF of the binary concrete is
        P(s <= x) = sigmoid(beta logit(x) - log_alpha), and logit(-gamma / (zeta - gamma)) = log(-gamma / zeta).
        Unlike the official code we do not clip p to [eps, 1 - eps]: that clip would zero the gradient."""
        shift = self.beta * math.log(-self.gamma / self.zeta)      # scalar, negative for the defaults
        p = _sigmoid(log_alpha - shift)                            # (...) probability the gate is open
        cache = p
        return p, cache

    def penalty_backward(self, dp, cache):
        """dP/dlog_alpha = p (1 - p), the derivative of the sigmoid in eq. 12."""
        p = cache
        dlog_alpha = dp * p * (1.0 - p)                            # (...)
        return dlog_alpha

    # ---------------------------------------------------------------- test time and distribution facts
    def test_gate(self, log_alpha):
        """Continuous test-time gate clip(sigmoid(log_alpha) (zeta - gamma) + gamma, 0, 1) (Louizos eq. 13; the
        official code's readout; the paper's is :meth:`binary_gate`).

        A head is pruned (g = 0) iff sigmoid(log_alpha) <= -gamma / (zeta - gamma), i.e. log_alpha <= log(-gamma / zeta)
        (-2.40 for the defaults); it is fully on (g = 1) iff log_alpha >= log((1 - gamma) / (zeta - 1)) (+2.40)."""
        s = _sigmoid(log_alpha)                                    # (...)
        g = xp.clip(s * (self.zeta - self.gamma) + self.gamma, 0.0, 1.0)  # (...)
        return g

    def binary_threshold(self):
        """The log_alpha above which P(g = 1) > P(g = 0): from :meth:`mass_at_0_and_1`, as the sigmoid is
        increasing, P(g = 1) > P(g = 0) iff log_alpha - c1 > c0 - log_alpha, i.e. log_alpha > (c0 + c1) / 2 with
        c0 = beta log(-gamma / zeta), c1 = beta log((1 - gamma) / (zeta - 1)); 0 for the symmetric defaults."""
        c0 = self.beta * math.log(-self.gamma / self.zeta)
        c1 = self.beta * math.log((1.0 - self.gamma) / (self.zeta - 1.0))
        return 0.5 * (c0 + c1)

    def binary_gate(self, log_alpha):
        """The paper's test-time gate (Voita et al. 2019, sec. 6.1): 1 where P(g = 1) >= P(g = 0), else 0,
        i.e. 1[log_alpha >= :meth:`binary_threshold`] (ties open). Same dtype and shape as log_alpha."""
        return (log_alpha >= self.binary_threshold()).astype(log_alpha.dtype)  # (...)

    def settled(self, log_alpha, threshold=0.95):
        """Boolean mask of settled gates: max(P(g = 0), P(g = 1)) > ``threshold`` (sec. 6.1: training
        converges to gates that are almost completely closed or completely open). For the defaults and
        threshold 0.95 that is |log_alpha| > logit(0.95) + beta log(11) = 3.74."""
        if not 0.5 <= threshold < 1.0:
            raise GateError(f"HardConcrete.settled: threshold must lie in [0.5, 1), got {threshold}")
        p0, p1 = self.mass_at_0_and_1(log_alpha)                   # (...)
        return xp.maximum(p0, p1) > threshold                      # (...) bool

    def mass_at_0_and_1(self, log_alpha):
        """(P(g = 0), P(g = 1)) of the training-time gate, from the binary-concrete CDF
        P(s <= x) = sigmoid(beta logit(x) - log_alpha) (Maddison et al. 2017; Louizos sec. 4):
        P(g = 0) = sigmoid(beta log(-gamma / zeta) - log_alpha),
        P(g = 1) = sigmoid(log_alpha - beta log((1 - gamma) / (zeta - 1)))."""
        p0 = _sigmoid(self.beta * math.log(-self.gamma / self.zeta) - log_alpha)           # (...)
        p1 = _sigmoid(log_alpha - self.beta * math.log((1.0 - self.gamma) / (self.zeta - 1.0)))  # (...)
        return p0, p1

    def density(self, x, log_alpha):
        """Density of the continuous part of g on 0 < x < 1 (it integrates to 1 - P(g=0) - P(g=1)).

        Binary concrete density (Maddison et al. 2017, eq. 21, with alpha = exp(log_alpha)):
        q(s) = beta alpha s^(-beta-1) (1-s)^(-beta-1) / (alpha s^(-beta) + (1-s)^(-beta))^2;
        the stretch s_bar = s (zeta - gamma) + gamma divides it by (zeta - gamma). Written in logs for range."""
        inside = (x > 0.0) & (x < 1.0)                             # (...) the point masses are not in here
        x_safe = xp.where(inside, x, 0.5)                          # (...) keeps the logs finite outside
        s = (x_safe - self.gamma) / (self.zeta - self.gamma)       # (...) pre-image of x under the stretch
        log_s, log_1s = xp.log(s), xp.log(1.0 - s)                 # (...)
        a = log_alpha - self.beta * log_s                          # (...) log(alpha s^-beta)
        b = -self.beta * log_1s                                    # (...) log((1-s)^-beta)
        log_q = (math.log(self.beta) + log_alpha - (self.beta + 1.0) * (log_s + log_1s)
                 - 2.0 * xp.logaddexp(a, b))                       # (...)
        return xp.where(inside, xp.exp(log_q) / (self.zeta - self.gamma), 0.0)  # (...)

    @staticmethod
    def draw_u(rng, shape, eps=1e-6, dtype=backend.FLOAT_TRAIN):
        """Noise u ~ U(eps, 1 - eps) from a host numpy Generator (``backend.rng(seed)``), moved to the device.
        The eps margin (as in the official code) keeps log u and log(1 - u) finite."""
        if not 0.0 < eps < 0.5:
            raise GateError(f"HardConcrete.draw_u: eps must be in (0, 0.5), got {eps}")
        u_host = rng.uniform(eps, 1.0 - eps, size=shape)           # shape, float64 on the host
        return backend.to_device(u_host, dtype=dtype)              # shape, on the device


def settled_share(log_alpha, hc=None, threshold=0.95):
    """Share of all gates (a dict kind -> (L, H), or one array) with max(P(g = 0), P(g = 1)) > ``threshold``
    (:meth:`HardConcrete.settled`); a float in [0, 1]."""
    hc = hc or HardConcrete()
    arrays = list(log_alpha.values()) if isinstance(log_alpha, dict) else [log_alpha]
    n = sum(int(a.size) for a in arrays)
    if n == 0:
        raise GateError("settled_share: no gates")
    return sum(int(hc.settled(a, threshold).sum()) for a in arrays) / n


# -------------------------------------------------------------------- combining layers
def l0_total(penalties, reduction="sum"):
    """Combine per-layer P(g != 0) arrays into the scalar L_C of the loss  CE + lambda L_C.

    ``penalties``: a list of per-layer arrays (H_l,) (layers of several attention types may be concatenated
    into one list), or one (L, H) array, whose rows are the layers; the backward returns the same structure.
    reduction="sum": L_C = sum_l sum_h p_lh (Voita et al. eq. 6, the paper).
    reduction="layer_mean": L_C = (1 / L) sum_l sum_h p_lh, the official code's mean over gated layers of
    per-layer sums (problems/concrete.py), so its lambda is about L times the paper's."""
    if reduction not in REDUCTIONS:
        raise GateError(f"l0_total: reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    as_array = hasattr(penalties, "ndim")
    if as_array and penalties.ndim != 2:
        raise GateError(f"l0_total: an array of penalties must be (L, H), got shape {penalties.shape}")
    layers = list(penalties)
    if not layers:
        raise GateError("l0_total: need at least one layer's penalties, got an empty list")
    layer_sums = [xp.sum(p) for p in layers]                      # L scalars
    total = sum(layer_sums[1:], layer_sums[0])                     # () sum over layers
    scale = 1.0 if reduction == "sum" else 1.0 / len(layers)
    total = total * scale                                          # ()
    shapes = [(penalties.shape, penalties.dtype)] if as_array else [(p.shape, p.dtype) for p in layers]
    cache = (shapes, scale, as_array)
    return total, cache


def l0_total_backward(dtotal, cache):
    """d L_C / d p_lh = scale (1 for "sum", 1 / L for "layer_mean"), for every head of every layer.
    Returns a list of (H_l,) arrays, or one (L, H) array if l0_total was given one."""
    shapes, scale, as_array = cache
    dps = [xp.full(shape, float(dtotal) * scale, dtype=dtype) for shape, dtype in shapes]  # list of (H_l,)
    return dps[0] if as_array else dps
