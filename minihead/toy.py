"""The useless-heads toy: hard-concrete gates close on heads the target does not read (Voita et al. 2019, sec. 6).

One copy, used by chapter 4 (section 5) and by ``tests/test_gates.py``. Six toy "heads" have fixed outputs
O_h in R^{N x d}; a linear read-out W_h turns each into a scalar contribution c_h = O_h W_h, and the model
predicts y_hat = sum_h g_h c_h with hard-concrete gates g_h (:class:`minihead.gates.HardConcrete`). The target
reads heads 0 and 1 only; heads 2-5 are noise of scales 0.5, 1, 2 and 3. Pruning minimises (paper eq. 5-6)

    L = 1/N sum_n (y_hat_n - y_n)^2 + lambda L_C,   L_C = sum_h P(g_h != 0)   (Louizos et al. 2018, eq. 12)

from the converged model (W the least-squares fit with every gate on, log_alpha = 3, all open), with the
project's Adam on log_alpha and, optionally, on W; one gate sample u (H,) per step shared by the batch, as in the
official code. Every gradient is the hand-written one of :mod:`minihead.gates`.
"""
import math

from . import backend
from .backend import xp
from .gates import LOG_ALPHA_OPEN, HardConcrete, l0_total, l0_total_backward
from .optim import Adam

SCALES = (1.0, 1.0, 0.5, 1.0, 2.0, 3.0)   # per-head output scale: heads 0, 1 are read, 2-5 are noise


def useless_heads(seed, n=256, d=4):
    """Toy head outputs O (N, H, d) in float64 and the target y = O_0 w_0 + O_1 w_1 + 0.1 noise (N,), with
    w_h ~ N(0, 1/d); H = 6 heads of output scales SCALES. Drawn on the host from ``backend.rng(seed)`` in the
    order O, w, noise, so a seed gives the same numbers on every backend."""
    r = backend.rng(seed)
    h = len(SCALES)
    f64 = backend.FLOAT_CHECK
    scale = xp.asarray(SCALES, dtype=f64)                                                 # (H,)
    O = backend.to_device(r.standard_normal((n, h, d)), dtype=f64) * scale[None, :, None]  # (N, H, d)
    w_true = backend.to_device(r.standard_normal((2, d)), dtype=f64) / math.sqrt(d)      # (2, d)
    noise = backend.to_device(r.standard_normal(n), dtype=f64)                            # (N,)
    y = O[:, 0] @ w_true[0] + O[:, 1] @ w_true[1] + 0.1 * noise                           # (N,) reads heads 0, 1
    return O, y


def prune_useless_heads(seed, lam=0.05, lr=0.1, lr_w=0.01, steps=300, init=LOG_ALPHA_OPEN, reduction="sum",
                        hc=None):
    """Train the gates of the toy heads of ``useless_heads(seed)`` for ``steps`` Adam steps: lr on log_alpha,
    lr_w on the read-out W (0 freezes it), penalty lam * L_C with ``l0_total(..., reduction)``; gate noise from
    ``backend.rng(seed + 1000)``.

    Returns ``(test_gates (H,), log_alpha (H,), trajectory (steps, H) of log_alpha on the host, losses)``, where
    the test-time gate is ``hc.test_gate`` (Louizos eq. 13) and ``losses[t]`` is the sampled objective L at step t.
    """
    hc = hc or HardConcrete()
    f64 = backend.FLOAT_CHECK
    O, y = useless_heads(seed)
    n, h, d = O.shape
    params = {"W": xp.linalg.lstsq(O.reshape(n, h * d), y, rcond=None)[0].reshape(h, d),  # (H, d) converged
              "log_alpha": xp.full((h,), init, dtype=f64)}                               # (H,) all gates open
    opt_gates, opt_w = Adam(params, names=["log_alpha"]), Adam(params, names=["W"])     # two learning rates
    gen = backend.rng(seed + 1000)
    traj, losses = [], []
    for _ in range(steps):
        la, W = params["log_alpha"], params["W"]
        g, gcache = hc.sample_forward(la, hc.draw_u(gen, (h,), dtype=f64))      # (H,) training gates
        contrib = xp.einsum("nhd,hd->nh", O, W)                                  # (N, H) c_h per example
        err = contrib @ g - y                                                    # (N,)
        p, pcache = hc.penalty_forward(la)                                       # (H,)
        l0, tcache = l0_total([p], reduction)
        losses.append(float(xp.mean(err ** 2) + lam * l0))
        dpred = 2.0 * err / n                                                    # (N,) d mean-square / d y_hat
        dg = contrib.T @ dpred                                                   # (H,)
        dp = l0_total_backward(lam, tcache)[0]                                   # (H,)
        grads = {"log_alpha": hc.sample_backward(dg, gcache) + hc.penalty_backward(dp, pcache),  # (H,)
                 "W": xp.einsum("n,h,nhd->hd", dpred, g, O)}                     # (H, d)
        opt_gates.step(params, grads, lr)
        if lr_w:
            opt_w.step(params, grads, lr_w)
        traj.append(params["log_alpha"].copy())                                  # (H,)
    traj = backend.to_host(xp.stack(traj))                                       # (steps, H)
    return hc.test_gate(params["log_alpha"]), params["log_alpha"], traj, losses
