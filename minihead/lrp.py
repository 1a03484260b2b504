"""Layer-wise relevance propagation (LRP) through the encoder-decoder, from the forward caches: the driver.

Voita et al. 2019, sec. 4 and appendix A, after Ding et al. 2017 ("Visualizing and Understanding Neural Machine
Translation"): relevance starts at the top-1 logit of every real target position (teacher forcing), total 1 per
position, and flows back layer by layer to the source and target embeddings. The relevance of a head is the
relevance of its output neurons (``Z``, before the gate and W^O), summed.

The rules are pure functions in :mod:`minihead.lrp_rules`, registered by layer type and family in
:data:`RULES`; :class:`Rules` picks a family and dispatches through that registry:

    family      linear / residual / LayerNorm / attention value path
    "z"         the paper's weight-ratio rule (default): bias not an input, conserving exactly
    "official"  the-story-of-heads: alpha = beta = 0.5, bias spread over the inputs, each layer rescaled
    "epsilon"   epsilon rule, bias in the denominator (its share lost)
    "alphabeta" alpha-beta, bias in z+ / z- (its share lost)

plus ``layernorm="identity"`` and ``attention="full"`` (queries and keys too) as options; ReLU and the head
gate pass relevance unchanged, an embedding sums over d. With "z" or "official" the total relevance is
conserved at every stage, biases and LayerNorm betas included (tests/test_lrp.py, to 1e-6 in float64); the
positional encoding is an input, so it keeps its share (reported apart from the token embedding).

Relevance arrays may carry extra LEADING axes in front of the activation's shape (one per starting
position for ``per_position=True``); every rule broadcasts over them.
"""
from dataclasses import dataclass, field
from typing import NamedTuple

from . import model
from .backend import xp
from .layers import sinusoidal_positions
from .lrp_rules import (  # noqa: F401 (the rules are re-exported: lrp.linear_z and the others stay importable)
    DEFAULT_EPS,
    FAMILIES,
    OFFICIAL_EPS,
    RULES,
    LRPError,
    attention_full,
    attention_full_official,
    attention_full_z,
    attention_values,
    attention_values_alphabeta,
    attention_values_official,
    attention_values_z,
    call,
    elementwise_identity,
    embedding_sum,
    layernorm_alphabeta,
    layernorm_identity,
    layernorm_linear,
    layernorm_official,
    layernorm_z,
    linear_alphabeta,
    linear_epsilon,
    linear_official,
    linear_z,
    official_transitions,
    rescale,
    residual_alphabeta,
    residual_official,
    residual_proportional,
    residual_z,
)

KINDS = ("enc", "dec_self", "dec_enc")


# --------------------------------------------------------------------------- helpers
def _tot(R, n_act):
    """Total relevance per sentence (and per leading index): sum over the activation axes after the
    batch axis. R (*lead, B, ...) with ``n_act`` activation axes (B included) -> (*lead, B)."""
    if R is None:
        return 0.0
    return R.sum(axis=tuple(range(R.ndim - n_act + 1, R.ndim)))


# --------------------------------------------------------------------------- options
@dataclass
class Rules:
    """Which family of :data:`RULES` is used, and its constants; the registry is what dispatches.

    ``linear`` picks the family for every linear-in-the-input operation (linear layers, the residual split, the
    LayerNorm map and the value path of attention): "z" (default, the paper's), "official" (the official
    code's alpha-beta with bias spreading and per-layer rescaling), "epsilon" or "alphabeta" (``alpha``,
    ``beta``, ``convention``, ``fallback``). ``layernorm="identity"`` passes relevance through LayerNorm
    unchanged; ``attention="full"`` also feeds queries and keys: for "official" the official code's full
    Jacobian of the attention core (its default, so None picks it), otherwise z / epsilon splits with
    ``value_share`` to the values; ``attention="values"`` holds the weights constant (None picks it for the
    other families). ``eps`` None: the family's own (z: none; official: 1e-5; epsilon and alpha-beta: 1e-6)."""
    linear: str = "z"
    layernorm: str = "linear"
    attention: str = None
    eps: float = None
    alpha: float = 0.5
    beta: float = 0.5
    convention: str = "sum"
    value_share: float = 0.5
    fallback: bool = True

    def __post_init__(self):
        if self.attention is None:
            self.attention = "full" if self.linear == "official" else "values"
        for kind, names in (("linear", FAMILIES), ("layernorm", ("linear", "identity")),
                            ("attention", ("values", "full"))):
            if getattr(self, kind) not in names:
                raise LRPError(f"unknown {kind} rule {getattr(self, kind)!r}; choose one of {sorted(names)}")
        if self.eps is not None and self.eps < 0:
            raise LRPError(f"eps must be >= 0, got {self.eps}")
        if not 0.0 <= self.value_share <= 1.0:
            raise LRPError(f"value_share must lie in [0, 1], got {self.value_share}")
        if self.convention not in ("sum", "difference"):
            raise LRPError(f"alpha-beta convention must be 'sum' or 'difference', got {self.convention!r}")

    @property
    def consts(self):
        """The constants handed to every rule (each takes the ones it names)."""
        eps = self.eps if self.eps is not None else {"official": OFFICIAL_EPS}.get(self.linear, DEFAULT_EPS)
        return dict(eps=eps, alpha=self.alpha, beta=self.beta, convention=self.convention,
                    fallback=self.fallback, value_share=self.value_share)

    def rule(self, layer):
        """The registered function used for ``layer`` ("linear", "residual", "layernorm", "attention")."""
        if layer == "layernorm" and self.layernorm == "identity":
            return RULES["layernorm"]["identity"]
        if layer == "attention" and self.attention == "full":
            return RULES["attention"][{"z": "full_z", "official": "full_official"}.get(self.linear, "full")]
        return RULES[layer][self.linear]

    def lin(self, x, W, b, z, R):
        return call(self.rule("linear"), x, W, b, z, R, **self.consts)

    def ln(self, x, y, c_ln, R, b=None):
        xc, xhat, rstd, g = c_ln
        return call(self.rule("layernorm"), x, y, rstd, g, R, b=b, **self.consts)

    def res(self, x, f, R, f_in=None):
        return call(self.rule("residual"), x, f, R, f_in=f_in, **self.consts)

    def attn(self, A, Q, K, V, Z, scale, R):
        return call(self.rule("attention"), A, Q, K, V, Z, scale, R, **self.consts)


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


class Pass(NamedTuple):
    """What one backward relevance pass returns, with the starting-position axis T0 (if any) still LEADING:
    the fields of :class:`Relevance` as per-layer lists (head, sublayer, full) and arrays, plus R0, the
    starting relevance (*lead, B, T)."""
    R0: object
    head: dict
    sublayer: dict
    src: object
    tgt: object
    src_token: object
    tgt_token: object
    totals: dict
    full: dict


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
    fx_in = _sublayer_input_part(sl)                         # (B, T, d) fx without its output bias
    if cfg.pre_norm:
        R_x, R_fx = rules.res(x, fx, R_y, fx_in)
        R_h, extra = core(R_fx, fx)
        h = _ln_out(sl)                                      # (B, T, d) LN output = f's input
        return R_x + rules.ln(x, h, sl["ln"], R_h, params[sl["ln_name"] + ".b"]), extra, R_fx
    xc, xhat, rstd, g = sl["ln"]
    y = xhat * g + params[sl["ln_name"] + ".b"]              # (B, T, d) sublayer output
    R_r = rules.ln(x + fx, y, sl["ln"], R_y, params[sl["ln_name"] + ".b"])
    R_x, R_fx = rules.res(x, fx, R_r, fx_in)
    R_h, extra = core(R_fx, fx)
    return R_x + R_h, extra, R_fx


def _sublayer_input_part(sl):
    """f(x) without the bias of f's last linear layer (W^O of attention, W2 of the FFN): a W, recomputed from the
    cached input ``a`` of that layer so that it is exactly 0 where ``a`` is (not f - b, which would cancel)."""
    cf = sl["f"]
    a, W = cf["o"] if "o" in cf else cf["lin2"]             # (B, T, din), (din, d)
    return (a.reshape(-1, a.shape[-1]) @ W).reshape(a.shape[:-1] + (W.shape[1],))  # (B, T, d)


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
    """One backward relevance pass; returns a :class:`Pass` (T0 still leading)."""
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
    return Pass(R0=R0, head=head, sublayer=sub_tot, src=src, tgt=tgt, src_token=src_tok, tgt_token=tgt_tok,
                totals=totals, full=full)


def _embedding_relprop(R, c_emb, rules):
    """x0 = e + PE: the residual rule splits R between token embedding and positional encoding; both
    relevances summed over d per token (the embedding rule). Returns (R_x0, R_token), (*lead, B, T)."""
    e = c_emb["e"]                                           # (B, T, d)
    pe = sinusoidal_positions(e.shape[1], e.shape[2], e.dtype)[None]  # (1, T, d)
    R_e, _ = rules.res(e, pe, R)
    return embedding_sum(R), embedding_sum(R_e)


def relevance(params, cfg, batch, per_position=False, chunk=None, keep_full=False, gates=None, rules=None):
    """LRP of one batch under teacher forcing (evaluation mode, no dropout); returns :class:`Relevance`.

    ``per_position=False`` (default) starts relevance 1 at every real target position at once, so the
    head relevances are the SUM over positions (one backward pass, cheap); ``per_position=True`` starts
    each position on its own (an extra axis T0, the paper-exact input to per-position normalisation),
    ``chunk`` starting positions per pass (memory x chunk; default all T at once). ``rules``: a :class:`Rules`
    (the family and its constants; None: ``Rules()``, the paper's z-rule); ``gates``: a pruned model's."""
    rules = rules or Rules()
    logits, cache = model.forward(params, cfg, batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask,
                                  gates=gates, rng=None)
    cache["logits"] = logits
    _check_eval(cache)
    tgt_mask = xp.asarray(batch.tgt_mask)
    if not per_position:
        return _result(_propagate(params, cfg, cache, tgt_mask, rules, None, keep_full), lead=False)
    T = logits.shape[1]
    step = T if chunk is None else int(chunk)
    if step < 1:
        raise LRPError(f"chunk must be a positive number of positions, got {chunk}")
    pieces = [_propagate(params, cfg, cache, tgt_mask, rules, list(range(t, min(t + step, T))), keep_full)
              for t in range(0, T, step)]
    cat = lambda arrs: xp.concatenate(arrs, axis=0)

    def layers(name):
        return {k: [cat([getattr(p, name)[k][l] for p in pieces]) for l in range(cfg.n_layers(k))]
                for k in getattr(pieces[0], name)}
    whole = Pass(R0=cat([p.R0 for p in pieces]), head=layers("head"), sublayer=layers("sublayer"),
                 **{n: cat([getattr(p, n) for p in pieces]) for n in ("src", "tgt", "src_token", "tgt_token")},
                 totals={s: cat([p.totals[s] for p in pieces]) for s in pieces[0].totals},
                 full=layers("full") if keep_full else {})
    return _result(whole, lead=True)


def _result(p, lead):
    """Stack layers of a :class:`Pass` and move the starting-position axis T0 behind B."""
    R0, head, sub_tot, totals, full = p.R0, p.head, p.sublayer, p.totals, p.full
    mv = (lambda a: xp.moveaxis(a, 0, 1)) if lead else (lambda a: a)

    def stack(lst, n_act):
        if not lst:
            return xp.zeros((0,))
        a = xp.stack(lst)                                    # (L, *lead, B, ...)
        return xp.moveaxis(a, 1, 2) if lead else a
    return Relevance(
        head={k: stack(v, 2) for k, v in head.items()},
        sublayer={k: stack(v, 1) for k, v in sub_tot.items()},
        src=mv(p.src), tgt=mv(p.tgt), src_token=mv(p.src_token), tgt_token=mv(p.tgt_token),
        totals={s: mv(v) for s, v in totals.items()},
        n_start=R0.sum(axis=tuple(range(R0.ndim - 2)) + (R0.ndim - 1,)),
        full={k: [mv(a) for a in v] for k, v in full.items()})

