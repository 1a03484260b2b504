"""Greedy and beam-search decoding.

Both are incremental: each step runs the decoder on the newest position only, with the earlier
positions' self-attention inputs kept per layer (:func:`decoder_step`), built from the very sublayer and
attention functions of training; beam search reorders that history with the surviving beams. A test checks
that decoder_step gives the training forward's logits, and that beam search decodes the same as its slow
twin (``incremental=False``), which re-runs the decoder over the whole prefix at every step.
"""
import math

from .backend import xp
from .data.vocab import BOS, EOS, PAD, batches
from .errors import DataError
from .layers import attention_bias, embedding_forward, ffn_forward, layernorm_forward, log_softmax, \
    mha_forward, mha_keys_values, sinusoidal_positions
from .model import _emb_name, _gate, decoder_forward, encoder_forward, output_forward, sub, sublayer_forward


def _max_len(batch, a=1.5, b=10):
    return int(batch.src.shape[1] * a + b)


def cross_keys_values(params, cfg, enc):
    """Per decoder layer, the decoder-encoder attention's K and V of the encoder output (computed once)."""
    return [mha_keys_values(enc, sub(params, f"dec{l}.cross"), cfg.n_heads) for l in range(cfg.n_dec_layers)]


def decoder_step(params, cfg, enc, cross_bias, ids, t, pe, hist, gates=None, cross_kv=None):
    """Logits (B, V) of position ``t`` given its input ids (B,); ``hist[l]`` holds the inputs of layer l's
    self-attention at positions < t (B, t, d) and is extended here, so the new query attends to them and
    to itself: the causal mask of training, without recomputing the prefix. ``cross_kv`` from
    :func:`cross_keys_values` saves recomputing the encoder's keys and values at every step."""
    e, _ = embedding_forward(ids[:, None], params[_emb_name(cfg, "tgt")], math.sqrt(cfg.d_model))  # (B, 1, d)
    y = e + pe[t][None, None]                                                     # (B, 1, d)
    for l in range(cfg.n_dec_layers):
        ps, pc, pf = (sub(params, f"dec{l}.{n}") for n in ("self", "cross", "ffn"))
        gs, gc = _gate(gates, "dec_self", l), _gate(gates, "dec_enc", l)

        def self_attn(h, l=l, ps=ps, gs=gs):
            hist[l] = h if hist[l] is None else xp.concatenate([hist[l], h], axis=1)  # (B, t + 1, d)
            return mha_forward(h, hist[l], ps, None, cfg.n_heads, gs)
        y, _ = sublayer_forward(y, params, f"dec{l}.ln1", self_attn, cfg, None)
        kv = None if cross_kv is None else cross_kv[l]
        y, _ = sublayer_forward(y, params, f"dec{l}.ln2",
                                lambda h: mha_forward(h, enc, pc, cross_bias, cfg.n_heads, gc, kv=kv), cfg, None)
        y, _ = sublayer_forward(y, params, f"dec{l}.ln3", lambda h: ffn_forward(h, pf, 0.0, None), cfg, None)
    if cfg.pre_norm:
        y, _ = layernorm_forward(y, params["dec_ln.g"], params["dec_ln.b"], cfg.ln_eps)
    logits, _ = output_forward(params, cfg, y)                                    # (B, 1, V)
    return logits[:, 0]


def greedy_batch(params, cfg, batch, gates=None, max_len=None):
    """Ids (B, <= max_len) of the argmax translation of each source row (PAD after EOS)."""
    enc, _ = encoder_forward(params, cfg, batch.src, batch.src_mask, gates)      # (B, S, d)
    B = enc.shape[0]
    T = max_len or _max_len(batch)
    pe = sinusoidal_positions(T, cfg.d_model, cfg.dtype)                          # (T, d)
    cross_bias = attention_bias(batch.src_mask, dtype=cfg.dtype)                  # (B, 1, 1, S)
    hist, cross_kv = [None] * cfg.n_dec_layers, cross_keys_values(params, cfg, enc)
    ys = xp.full((B, 1), BOS, dtype="int64")                                      # (B, 1)
    done = xp.zeros(B, dtype=bool)                                                # (B,)
    for t in range(T):
        logits = decoder_step(params, cfg, enc, cross_bias, ys[:, -1], t, pe, hist, gates, cross_kv)  # (B, V)
        nxt = xp.where(done, PAD, logits.argmax(-1))                              # (B,)
        ys = xp.concatenate([ys, nxt[:, None]], axis=1)                           # (B, t + 1)
        done = done | (nxt == EOS)
        if bool(done.all()):
            break
    return ys[:, 1:]


def beam_batch(params, cfg, batch, beam=4, alpha=0.6, gates=None, max_len=None, incremental=True):
    """Beam search; hypotheses ranked by log p / lp, lp = ((5 + len) / 6)^alpha (Wu et al. 2016, eq. 14).
    ``incremental=False`` is the slow reference: the decoder re-run over each whole prefix."""
    enc, _ = encoder_forward(params, cfg, batch.src, batch.src_mask, gates)      # (B, S, d)
    B, S, d = enc.shape
    k = beam
    T = max_len or _max_len(batch)
    enc_k = xp.repeat(enc, k, axis=0)                                             # (B k, S, d)
    mask_k = xp.repeat(batch.src_mask, k, axis=0)                                 # (B k, S)
    if incremental:
        pe = sinusoidal_positions(T, cfg.d_model, cfg.dtype)                      # (T, d)
        cross_bias = attention_bias(mask_k, dtype=cfg.dtype)                      # (B k, 1, 1, S)
        hist, cross_kv = [None] * cfg.n_dec_layers, cross_keys_values(params, cfg, enc_k)
    ys = xp.full((B * k, 1), BOS, dtype="int64")                                  # (B k, 1)
    score = xp.zeros((B, k), dtype="float64")                                     # (B, k) sum log p
    score[:, 1:] = -1e9                                                           # start from one live beam
    done = xp.zeros((B, k), dtype=bool)
    lengths = xp.zeros((B, k), dtype="float64")
    for t in range(T):
        if incremental:
            logits = decoder_step(params, cfg, enc_k, cross_bias, ys[:, -1], t, pe, hist, gates, cross_kv)
        else:
            y, _ = decoder_forward(params, cfg, enc_k, mask_k, ys, xp.ones(ys.shape, bool), gates)
            logits = output_forward(params, cfg, y[:, -1:])[0][:, 0]              # (B k, V)
        logp = log_softmax(logits.astype("float64")).reshape(B, k, -1)            # (B, k, V)
        V = logp.shape[-1]
        # a finished beam can only extend with PAD at no cost
        frozen = xp.full((V,), -1e9)
        frozen[PAD] = 0.0
        logp = xp.where(done[:, :, None], frozen[None, None], logp)               # (B, k, V)
        cand = (score[:, :, None] + logp).reshape(B, k * V)                       # (B, k V)
        top = xp.argsort(-cand, axis=1, kind="stable")[:, :k]                     # (B, k)
        src_beam, tok = top // V, top % V                                         # (B, k)
        rows = (xp.arange(B)[:, None] * k + src_beam).reshape(-1)                 # (B k,)
        score = xp.take_along_axis(cand, top, axis=1)                             # (B, k)
        prev_done = xp.take_along_axis(done, src_beam, axis=1)
        lengths = xp.take_along_axis(lengths, src_beam, axis=1) + (~prev_done)
        done = prev_done | (tok == EOS)
        ys = xp.concatenate([ys[rows], tok.reshape(-1, 1)], axis=1)               # (B k, t + 1)
        if incremental:
            hist[:] = [h[rows] for h in hist]                                     # each (B k, t + 1, d)
        if bool(done.all()):
            break
    lp = ((5.0 + lengths) / 6.0) ** alpha                                         # (B, k)
    best = (score / lp).argmax(1)                                                 # (B,)
    return ys.reshape(B, k, -1)[xp.arange(B), best, 1:]


def translate(params, cfg, vocab, src_token_lists, gates=None, beam=1, max_tokens=6000):
    """Translate token lists; returns token lists in the input order (greedy when beam == 1).

    The empty-input rule (as :func:`minihead.data.corpus.read_parallel`'s): no sentences give no translations,
    and an empty sentence is refused (DataError naming its position), never translated."""
    empty = next((i for i, s in enumerate(src_token_lists) if len(s) == 0), None)
    if empty is not None:
        raise DataError(f"sentence {empty + 1}: empty (no tokens to translate)")
    src_ids = [vocab.encode(s) for s in src_token_lists]
    out = [None] * len(src_ids)
    for batch in batches(src_ids, [[] for _ in src_ids], max_tokens):
        ids = greedy_batch(params, cfg, batch, gates) if beam <= 1 else beam_batch(params, cfg, batch, beam, gates=gates)
        for row, i in enumerate(batch.index):
            out[i] = vocab.decode(ids[row])
    return out
