"""The Transformer encoder-decoder (Vaswani et al. 2017) with hand-written backprop.

Pre-norm with a final LayerNorm on each stack, as in the official tensor2tensor / the-story-of-heads
code (``pre_norm=True``); the original post-norm is ``pre_norm=False``. Parameters live in one flat dict
``name -> array`` (``enc0.self.Wq``, ``dec3.cross.Wo``, ``emb`` ...), gradients come back in a dict with the
same keys. Dropout is active exactly when a host ``rng`` is passed (training); without it the model is
deterministic (evaluation, analysis).

Gates: ``gates = {"enc": (L_enc, H), "dec_self": (L_dec, H), "dec_enc": (L_dec, H)}`` (any may be None)
multiply each head's output before W^O (Voita et al. 2019, sec. 6); ``backward`` returns their gradients.
"""
import math
from dataclasses import asdict, dataclass, fields

from . import backend
from .backend import xp
from .layers import (attention_bias, dropout_backward, dropout_forward, embedding_backward,
                     embedding_forward, ffn_backward, ffn_forward, layernorm_backward,
                     layernorm_forward, linear_backward, linear_forward, mha_backward, mha_forward,
                     sinusoidal_positions, xent_backward, xent_forward)

GATE_KINDS = ("enc", "dec_self", "dec_enc")


@dataclass
class Config:
    """Model and loss hyper-parameters. ``vocab_size`` is the joint source/target vocabulary."""
    vocab_size: int = 100
    n_enc_layers: int = 6
    n_dec_layers: int = 6
    n_heads: int = 4
    d_model: int = 128
    d_ff: int = 512
    dropout: float = 0.1          # on embeddings, sublayer outputs and inside the FFN
    attn_dropout: float = 0.0     # on attention weights
    label_smoothing: float = 0.1
    shared_embeddings: bool = True  # one matrix for source, target and the output projection
    pre_norm: bool = True
    ln_eps: float = 1e-6
    dtype: str = backend.FLOAT_TRAIN

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        names = {f.name: f.type for f in fields(cls)}
        unknown = set(d) - set(names)
        if unknown:
            raise ValueError(f"unknown config fields: {sorted(unknown)}")
        return cls(**d)

    def n_layers(self, kind):
        return self.n_enc_layers if kind == "enc" else self.n_dec_layers


# --------------------------------------------------------------------------- parameters
def _attn_names(prefix):
    return [f"{prefix}.{n}" for n in ("Wq", "bq", "Wk", "bk", "Wv", "bv", "Wo", "bo")]


def init_params(cfg, seed=0):
    """Xavier-uniform weights, zero biases, unit LayerNorm gains, N(0, d^-1/2) embeddings."""
    gen = backend.rng(seed)
    d, f, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    params = {}

    def xavier(name, n_in, n_out):
        lim = math.sqrt(6.0 / (n_in + n_out))
        params[name] = backend.to_device(gen.uniform(-lim, lim, (n_in, n_out)), cfg.dtype)

    def zeros(name, n):
        params[name] = xp.zeros(n, dtype=cfg.dtype)

    def ln(prefix):
        params[prefix + ".g"] = xp.ones(d, dtype=cfg.dtype)
        zeros(prefix + ".b", d)

    def attn(prefix):
        for w in ("Wq", "Wk", "Wv", "Wo"):
            xavier(f"{prefix}.{w}", d, d)
            zeros(f"{prefix}.b{w[1]}", d)

    def ffn(prefix):
        xavier(prefix + ".W1", d, f)
        zeros(prefix + ".b1", f)
        xavier(prefix + ".W2", f, d)
        zeros(prefix + ".b2", d)

    for name in (["emb"] if cfg.shared_embeddings else ["src_emb", "tgt_emb"]):
        params[name] = backend.to_device(gen.normal(0, d ** -0.5, (V, d)), cfg.dtype)
    if not cfg.shared_embeddings:
        xavier("out.W", d, V)
        zeros("out.b", V)
    for l in range(cfg.n_enc_layers):
        ln(f"enc{l}.ln1"), attn(f"enc{l}.self"), ln(f"enc{l}.ln2"), ffn(f"enc{l}.ffn")
    for l in range(cfg.n_dec_layers):
        ln(f"dec{l}.ln1"), attn(f"dec{l}.self"), ln(f"dec{l}.ln2"), attn(f"dec{l}.cross")
        ln(f"dec{l}.ln3"), ffn(f"dec{l}.ffn")
    if cfg.pre_norm:
        ln("enc_ln"), ln("dec_ln")
    return params


def sub(params, prefix):
    """The parameters under ``prefix.`` with the prefix stripped: sub(p, "enc0.self")["Wq"]."""
    n = len(prefix) + 1
    return {k[n:]: v for k, v in params.items() if k.startswith(prefix + ".")}


def groups(params):
    """Every sub-dict at once, in one pass over the names: groups(p)["enc0.self"] == sub(p, "enc0.self")."""
    out = {}
    for k, v in params.items():
        prefix, _, name = k.rpartition(".")
        out.setdefault(prefix, {})[name] = v
    return out


def _add_prefixed(grads, prefix, g):
    for k, v in g.items():
        grads[f"{prefix}.{k}"] = v


# --------------------------------------------------------------------------- residual sublayer
def sublayer_forward(x, params, ln_name, f, cfg, rng):
    """A residual sublayer around ``f`` (returns (fx, cache)).

    pre-norm:  y = x + drop(f(LN(x)));   post-norm:  y = LN(x + drop(f(x)))."""
    g, b = params[ln_name + ".g"], params[ln_name + ".b"]
    if cfg.pre_norm:
        h, c_ln = layernorm_forward(x, g, b, cfg.ln_eps)     # (B, T, d)
        fx, c_f = f(h)                                       # (B, T, d)
        fx_d, c_d = dropout_forward(fx, cfg.dropout, rng, inplace=True)
        y = x + fx_d                                         # (B, T, d) residual
    else:
        fx, c_f = f(x)
        fx_d, c_d = dropout_forward(fx, cfg.dropout, rng, inplace=True)
        r = x + fx_d                                         # (B, T, d) residual
        y, c_ln = layernorm_forward(r, g, b, cfg.ln_eps)
    return y, {"ln": c_ln, "f": c_f, "drop": c_d, "x": x, "fx": fx_d, "ln_name": ln_name}


def sublayer_backward(dy, c, f_backward, cfg, grads):
    """Backward of :func:`sublayer_forward`; ``f_backward(dfx, cache_f) -> (dx_f, extra)``."""
    if cfg.pre_norm:
        dfx = dropout_backward(dy, c["drop"])
        dh, extra = f_backward(dfx, c["f"])
        dx, dg, db = layernorm_backward(dh, c["ln"], inplace=True)  # dh is f_backward's fresh array
        dx += dy                                             # residual branch + sublayer branch (dx is fresh)
    else:
        dr, dg, db = layernorm_backward(dy, c["ln"])
        dx, extra = f_backward(dropout_backward(dr, c["drop"]), c["f"])
        dx += dr                                             # (dx is fresh)
    grads[c["ln_name"] + ".g"], grads[c["ln_name"] + ".b"] = dg, db
    return dx, extra


# --------------------------------------------------------------------------- embeddings
def _emb_name(cfg, side):
    return "emb" if cfg.shared_embeddings else f"{side}_emb"


def embed_forward(params, cfg, ids, side, rng):
    """x = drop(sqrt(d) E[ids] + PE)."""
    B, T = ids.shape
    e, c_e = embedding_forward(ids, params[_emb_name(cfg, side)], math.sqrt(cfg.d_model))  # (B, T, d)
    x = e + sinusoidal_positions(T, cfg.d_model, cfg.dtype)[None]                          # (B, T, d)
    x, c_d = dropout_forward(x, cfg.dropout, rng, inplace=True)
    return x, {"emb": c_e, "drop": c_d, "side": side, "e": e}


def embed_backward(dx, c, cfg, grads):
    dE = embedding_backward(dropout_backward(dx, c["drop"]), c["emb"])
    name = _emb_name(cfg, c["side"])
    grads[name] = grads[name] + dE if name in grads else dE


def _gate(gates, kind, l):
    if gates is None or gates.get(kind) is None:
        return None
    return gates[kind][l]


# --------------------------------------------------------------------------- encoder
def encoder_forward(params, cfg, src, src_mask, gates=None, rng=None):
    """src (B, S) int, src_mask (B, S) bool -> enc (B, S, d) and a cache of every layer."""
    x, c_emb = embed_forward(params, cfg, src, "src", rng)   # (B, S, d)
    bias = attention_bias(src_mask, dtype=cfg.dtype)         # (B, 1, 1, S)
    layers, grp = [], groups(params)
    for l in range(cfg.n_enc_layers):
        pa, pf, g = grp[f"enc{l}.self"], grp[f"enc{l}.ffn"], _gate(gates, "enc", l)
        x, c_self = sublayer_forward(
            x, params, f"enc{l}.ln1",
            lambda h: mha_forward(h, h, pa, bias, cfg.n_heads, g, cfg.attn_dropout, rng), cfg, rng)
        x, c_ffn = sublayer_forward(
            x, params, f"enc{l}.ln2", lambda h: ffn_forward(h, pf, cfg.dropout, rng), cfg, rng)
        layers.append({"self": c_self, "ffn": c_ffn})
    c_ln = None
    if cfg.pre_norm:
        x, c_ln = layernorm_forward(x, params["enc_ln.g"], params["enc_ln.b"], cfg.ln_eps)
    return x, {"emb": c_emb, "layers": layers, "ln": c_ln}


def _self_attn_backward(dfx, c):
    dxq, dxkv, g, dgate = mha_backward(dfx, c)
    dxq += dxkv                                              # query and key/value paths share the input
    return dxq, (g, dgate)


def _ffn_backward(dfx, c):
    dx, g = ffn_backward(dfx, c)
    return dx, g


def encoder_backward(denc, c, cfg, grads, dgates):
    dx = denc
    if cfg.pre_norm:
        dx, grads["enc_ln.g"], grads["enc_ln.b"] = layernorm_backward(denc, c["ln"])
    for l in reversed(range(cfg.n_enc_layers)):
        cl = c["layers"][l]
        dx, g = sublayer_backward(dx, cl["ffn"], _ffn_backward, cfg, grads)
        _add_prefixed(grads, f"enc{l}.ffn", g)
        dx, (g, dgate) = sublayer_backward(dx, cl["self"], _self_attn_backward, cfg, grads)
        _add_prefixed(grads, f"enc{l}.self", g)
        if dgates is not None and dgate is not None:
            dgates["enc"][l] = dgate
    embed_backward(dx, c["emb"], cfg, grads)


# --------------------------------------------------------------------------- decoder
def decoder_forward(params, cfg, enc, src_mask, tgt_in, tgt_mask, gates=None, rng=None):
    """enc (B, S, d), tgt_in (B, T) int -> decoder states (B, T, d) (after the final LN) and a cache."""
    B, T = tgt_in.shape
    y, c_emb = embed_forward(params, cfg, tgt_in, "tgt", rng)  # (B, T, d)
    self_bias = attention_bias(tgt_mask, causal_T=T, dtype=cfg.dtype)  # (B, 1, T, T)
    cross_bias = attention_bias(src_mask, dtype=cfg.dtype)   # (B, 1, 1, S)
    layers, grp = [], groups(params)
    for l in range(cfg.n_dec_layers):
        ps, pc, pf = (grp[f"dec{l}.{n}"] for n in ("self", "cross", "ffn"))
        gs, gc = _gate(gates, "dec_self", l), _gate(gates, "dec_enc", l)
        y, c_self = sublayer_forward(
            y, params, f"dec{l}.ln1",
            lambda h: mha_forward(h, h, ps, self_bias, cfg.n_heads, gs, cfg.attn_dropout, rng), cfg, rng)
        y, c_cross = sublayer_forward(
            y, params, f"dec{l}.ln2",
            lambda h: mha_forward(h, enc, pc, cross_bias, cfg.n_heads, gc, cfg.attn_dropout, rng), cfg, rng)
        y, c_ffn = sublayer_forward(
            y, params, f"dec{l}.ln3", lambda h: ffn_forward(h, pf, cfg.dropout, rng), cfg, rng)
        layers.append({"self": c_self, "cross": c_cross, "ffn": c_ffn})
    c_ln = None
    if cfg.pre_norm:
        y, c_ln = layernorm_forward(y, params["dec_ln.g"], params["dec_ln.b"], cfg.ln_eps)
    return y, {"emb": c_emb, "layers": layers, "ln": c_ln}


def _cross_attn_backward(dfx, c):
    dxq, dxkv, g, dgate = mha_backward(dfx, c)
    return dxq, (g, dgate, dxkv)


def decoder_backward(dy, c, cfg, grads, dgates):
    """Returns the gradient with respect to the encoder output, summed over all cross-attentions."""
    if cfg.pre_norm:
        dy, grads["dec_ln.g"], grads["dec_ln.b"] = layernorm_backward(dy, c["ln"])
    denc = 0.0
    for l in reversed(range(cfg.n_dec_layers)):
        cl = c["layers"][l]
        dy, g = sublayer_backward(dy, cl["ffn"], _ffn_backward, cfg, grads)
        _add_prefixed(grads, f"dec{l}.ffn", g)
        dy, (g, dgate_c, dxkv) = sublayer_backward(dy, cl["cross"], _cross_attn_backward, cfg, grads)
        _add_prefixed(grads, f"dec{l}.cross", g)
        if l == cfg.n_dec_layers - 1:
            denc = dxkv
        else:
            denc += dxkv                                     # (B, S, d), summed over the cross-attentions
        dy, (g, dgate_s) = sublayer_backward(dy, cl["self"], _self_attn_backward, cfg, grads)
        _add_prefixed(grads, f"dec{l}.self", g)
        if dgates is not None:
            if dgate_s is not None:
                dgates["dec_self"][l] = dgate_s
            if dgate_c is not None:
                dgates["dec_enc"][l] = dgate_c
    embed_backward(dy, c["emb"], cfg, grads)
    return denc


# --------------------------------------------------------------------------- output and whole model
def output_forward(params, cfg, y):
    """logits = y E^T (shared embeddings) or y W_out + b_out.  y (B, T, d) -> (B, T, V)."""
    if cfg.shared_embeddings:
        B, T, d = y.shape
        logits = y.reshape(B * T, d) @ params["emb"].T        # (B T, V): one GEMM, not B small ones
        return logits.reshape(B, T, -1), {"y": y}
    logits, c = linear_forward(y, params["out.W"], params["out.b"])
    return logits, {"lin": c}


def output_backward(dlogits, c, params, cfg, grads):
    if cfg.shared_embeddings:
        y = c["y"]
        B, T, V = dlogits.shape
        dE = dlogits.reshape(-1, V).T @ y.reshape(-1, y.shape[-1])  # (V, d)
        grads["emb"] = grads["emb"] + dE if "emb" in grads else dE
        return (dlogits.reshape(B * T, V) @ params["emb"]).reshape(B, T, -1)  # (B, T, d)
    dy, grads["out.W"], grads["out.b"] = linear_backward(dlogits, c["lin"])
    return dy


def forward(params, cfg, src, src_mask, tgt_in, tgt_mask, gates=None, rng=None):
    """Teacher-forced forward pass: logits (B, T, V) and the cache of every layer."""
    enc, c_enc = encoder_forward(params, cfg, src, src_mask, gates, rng)              # (B, S, d)
    y, c_dec = decoder_forward(params, cfg, enc, src_mask, tgt_in, tgt_mask, gates, rng)  # (B, T, d)
    logits, c_out = output_forward(params, cfg, y)                                    # (B, T, V)
    return logits, {"enc": c_enc, "dec": c_dec, "out": c_out, "enc_out": enc, "dec_out": y,
                    "params": params, "cfg": cfg, "gates": gates}


def backward(dlogits, cache):
    """Gradients of every parameter (a dict like ``params``) and of the gates given to forward."""
    params, cfg, gates = cache["params"], cache["cfg"], cache["gates"]
    grads = {}
    dgates = None
    if gates is not None:
        dgates = {k: (None if gates.get(k) is None else xp.zeros_like(gates[k])) for k in GATE_KINDS}
    dy = output_backward(dlogits, cache["out"], params, cfg, grads)
    denc = decoder_backward(dy, cache["dec"], cfg, grads, dgates)
    encoder_backward(denc, cache["enc"], cfg, grads, dgates)
    return grads, dgates


def loss_forward(params, cfg, batch, gates=None, rng=None, n_norm=None):
    """Label-smoothed cross-entropy of a batch under teacher forcing: (loss, nll_sum, cache); averaged over
    the batch's real target tokens, or over ``n_norm`` tokens when given (a shard of a larger batch)."""
    logits, cache = forward(params, cfg, batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask, gates, rng)
    B, T, V = logits.shape
    loss, nll_sum, c_x = xent_forward(logits.reshape(B * T, V), batch.tgt_out.reshape(-1),  # logits are ours
                                      batch.tgt_mask.reshape(-1), cfg.label_smoothing, inplace=True,
                                      n_norm=n_norm)
    cache["xent"] = c_x
    return loss, nll_sum, cache


def loss_and_grads(params, cfg, batch, gates=None, rng=None, n_norm=None):
    """One training step's numbers: loss, gradients of every parameter, and info (nll, dgates, and the
    forward cache, whose ``xent`` entry the backward pass has spent: its exp z array became dlogits).
    ``n_norm``: see :func:`loss_forward`."""
    loss, nll_sum, cache = loss_forward(params, cfg, batch, gates, rng, n_norm)
    B, T = batch.tgt_in.shape
    dlogits = xent_backward(cache["xent"], inplace=True).reshape(B, T, -1)  # (B, T, V), spends cache["xent"]
    grads, dgates = backward(dlogits, cache)
    return loss, grads, {"nll_sum": nll_sum, "dgates": dgates, "cache": cache}
