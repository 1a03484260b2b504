"""Adam (Kingma & Ba 2015) with the inverse-square-root warm-up of Vaswani et al. 2017 (eq. 3),
and gradient clipping by global norm (Pascanu et al. 2013)."""
import math

from . import kernels
from .backend import xp


def noam_lr(step, d_model, warmup=4000, factor=1.0):
    """lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)  (Vaswani et al. 2017, eq. 3)."""
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def clip_grad_norm(grads, max_norm):
    """Scale all gradients in place so their global L2 norm is at most ``max_norm``; returns the norm before.

    On a GPU (:func:`minihead.kernels.active`) the norm is one dot product over the gradients laid end to end
    and a clipped dict holds views of that one scaled buffer (one host read and one launch, not one each)."""
    if kernels.active() and grads:
        flat = kernels.flatten(grads, list(grads))
        norm = math.sqrt(float(xp.vdot(flat, flat)))
        if max_norm and norm > max_norm:
            flat *= max_norm / (norm + 1e-12)
            grads.update(kernels.flat_views(flat, {k: g.shape for k, g in grads.items()}))
        return norm
    norm = math.sqrt(sum(float(xp.vdot(g, g)) for g in grads.values()))  # one BLAS dot product per array
    if max_norm and norm > max_norm:
        s = max_norm / (norm + 1e-12)
        for g in grads.values():
            g *= s
    return norm


class Adam:
    """m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr * m_hat / (sqrt(v_hat) + eps).

    ``names`` restricts the update to some parameters (e.g. only the gates' log_alpha, decoder frozen).

    On a GPU (:func:`minihead.kernels.active`) the parameters, m and v each live in one flat buffer and a step
    is one kernel launch: the constructor copies the parameters into the buffer and puts views of it into
    ``params`` in their place (the same values; the dict stays the one the caller holds)."""

    def __init__(self, params, betas=(0.9, 0.98), eps=1e-9, names=None):
        self.b1, self.b2, self.eps = betas[0], betas[1], eps
        self.names = sorted(params) if names is None else sorted(names)
        self.flat = None
        if kernels.active() and self.names and len({params[k].dtype for k in self.names}) == 1:
            shapes = {k: params[k].shape for k in self.names}
            self.flat = kernels.flatten(params, self.names)                 # (n,) every parameter
            self.flat_m, self.flat_v = xp.zeros_like(self.flat), xp.zeros_like(self.flat)
            self.views = kernels.flat_views(self.flat, shapes)
            params.update(self.views)
            self.m, self.v = kernels.flat_views(self.flat_m, shapes), kernels.flat_views(self.flat_v, shapes)
        else:
            self.m = {k: xp.zeros_like(params[k]) for k in self.names}
            self.v = {k: xp.zeros_like(params[k]) for k in self.names}
        self.t = 0

    def _flat_step(self, params, grads, c1, c2, lr):
        """The one-launch step, where every parameter is still its view of the buffer and has a gradient."""
        if any(params.get(k) is not self.views[k] or grads.get(k) is None for k in self.names):
            return False
        kernels.adam_update(self.flat, self.flat_m, self.flat_v, kernels.flatten(grads, self.names),
                            self.b1, self.b2, c1, c2, self.eps, lr)
        return True

    def step(self, params, grads, lr):
        self.t += 1
        c1 = 1.0 - self.b1 ** self.t
        c2 = 1.0 - self.b2 ** self.t
        if self.flat is not None and self._flat_step(params, grads, c1, c2, lr):
            return
        for k in self.names:
            g = grads.get(k)
            if g is None:
                continue
            m, v = self.m[k], self.v[k]
            m -= g                                           # m = b1 (m - g) + g = b1 m + (1 - b1) g
            m *= self.b1
            m += g
            t = g * g                                        # the one scratch array
            v -= t                                           # v = b2 (v - g^2) + g^2
            v *= self.b2
            v += t
            xp.multiply(v, 1.0 / c2, out=t)                  # t = sqrt(v_hat) + eps
            xp.sqrt(t, out=t)
            t += self.eps
            xp.divide(m, t, out=t)                           # t = m / (sqrt(v_hat) + eps)
            t *= lr / c1
            params[k] -= t

    def state_arrays(self):
        """Flat dict of arrays for a checkpoint (no pickle)."""
        out = {f"adam.m.{k}": self.m[k] for k in self.names}
        out.update({f"adam.v.{k}": self.v[k] for k in self.names})
        out["adam.t"] = xp.asarray(self.t)
        return out

    def load_state_arrays(self, arrays):
        for k in self.names:
            self.m[k][...] = arrays[f"adam.m.{k}"]
            self.v[k][...] = arrays[f"adam.v.{k}"]
        self.t = int(arrays["adam.t"])
