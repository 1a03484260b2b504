"""Greedy and beam-search decoding.

The decoder is re-run over the whole prefix at each step (no key/value cache): slower by a factor of
about T / 2, but it reuses the training forward exactly, which is what a reader wants to trust.
"""
from .backend import xp
from .data.vocab import BOS, EOS, PAD, batches
from .layers import log_softmax
from .model import decoder_forward, encoder_forward, output_forward


def _max_len(batch, a=1.5, b=10):
    return int(batch.src.shape[1] * a + b)


def greedy_batch(params, cfg, batch, gates=None, max_len=None):
    """Ids (B, <= max_len) of the argmax translation of each source row (PAD after EOS)."""
    enc, _ = encoder_forward(params, cfg, batch.src, batch.src_mask, gates)      # (B, S, d)
    B = enc.shape[0]
    ys = xp.full((B, 1), BOS, dtype="int64")                                      # (B, 1)
    done = xp.zeros(B, dtype=bool)                                                # (B,)
    for _ in range(max_len or _max_len(batch)):
        y, _ = decoder_forward(params, cfg, enc, batch.src_mask, ys, xp.ones(ys.shape, bool), gates)  # (B, t, d)
        logits, _ = output_forward(params, cfg, y[:, -1:])                      # (B, 1, V)
        nxt = xp.where(done, PAD, logits[:, 0].argmax(-1))                        # (B,)
        ys = xp.concatenate([ys, nxt[:, None]], axis=1)                           # (B, t + 1)
        done = done | (nxt == EOS)
        if bool(done.all()):
            break
    return ys[:, 1:]


def beam_batch(params, cfg, batch, beam=4, alpha=0.6, gates=None, max_len=None):
    """Beam search; hypotheses ranked by log p / lp, lp = ((5 + len) / 6)^alpha (Wu et al. 2016, eq. 14)."""
    enc, _ = encoder_forward(params, cfg, batch.src, batch.src_mask, gates)      # (B, S, d)
    B, S, d = enc.shape
    k = beam
    enc_k = xp.repeat(enc, k, axis=0)                                             # (B k, S, d)
    mask_k = xp.repeat(batch.src_mask, k, axis=0)                                 # (B k, S)
    ys = xp.full((B * k, 1), BOS, dtype="int64")                                  # (B k, 1)
    score = xp.zeros((B, k), dtype="float64")                                     # (B, k) sum log p
    score[:, 1:] = -1e9                                                           # start from one live beam
    done = xp.zeros((B, k), dtype=bool)
    lengths = xp.zeros((B, k), dtype="float64")
    for _ in range(max_len or _max_len(batch)):
        y, _ = decoder_forward(params, cfg, enc_k, mask_k, ys, xp.ones(ys.shape, bool), gates)
        logits, _ = output_forward(params, cfg, y[:, -1:])                       # (B k, 1, V)
        logp = log_softmax(logits[:, 0].astype("float64")).reshape(B, k, -1)      # (B, k, V)
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
        if bool(done.all()):
            break
    lp = ((5.0 + lengths) / 6.0) ** alpha                                         # (B, k)
    best = (score / lp).argmax(1)                                                 # (B,)
    return ys.reshape(B, k, -1)[xp.arange(B), best, 1:]


def translate(params, cfg, vocab, src_token_lists, gates=None, beam=1, max_tokens=6000):
    """Translate token lists; returns token lists in the input order (greedy when beam == 1)."""
    src_ids = [vocab.encode(s) for s in src_token_lists]
    out = [None] * len(src_ids)
    for batch in batches(src_ids, [[] for _ in src_ids], max_tokens):
        ids = greedy_batch(params, cfg, batch, gates) if beam <= 1 else beam_batch(params, cfg, batch, beam, gates=gates)
        for row, i in enumerate(batch.index):
            out[i] = vocab.decode(ids[row])
    return out
