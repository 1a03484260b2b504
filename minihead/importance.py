"""Head importance: LRP relevance, confidence, Michel et al.'s gradient score and single-head ablation.

Voita et al. 2019, sec. 4 and appendix A.3: a head's importance for one prediction is its LRP relevance
(summed over its output neurons, normalised over the heads of its layer); its importance is the average of
that over all generation steps of the dev set. Its confidence is the mean of its largest attention weight.
Michel et al. 2019 score a head by the expected |d loss / d xi_h| at head mask xi = 1, and (their sec. 3)
by the BLEU drop when the single head is masked. Every function returns ``dict kind -> (L, H)`` with kinds
"enc" (encoder self-attention), "dec_self" and "dec_enc" (decoder-encoder attention); layers and heads
are 0-based.
"""
import math
from types import SimpleNamespace

from . import backend, figures, lrp, model, roles
from .backend import xp
from .data.vocab import EOS
from .errors import MiniheadError
from .evaluate import bleu
from .translate import translate

KINDS = lrp.KINDS

class ImportanceError(MiniheadError, ValueError):
    """Inputs the importance measures cannot use (empty data, mismatched shapes)."""


NORMALISATIONS = ("sum", "abs")


def _normalise_rows(M, how="sum"):
    """Shares of each row (layer) over its heads; a row whose denominator is 0 stays 0.

    "sum": M / sum_h M, the paper's "normalised over the heads of its layer" read literally: shares add up to
    1, but signed relevance (z-rule) can make the denominator nearly cancel, so a share can be far outside
    [0, 1]. "abs": |M| / sum_h |M|, each head's share of the relevance MAGNITUDE (in [0, 1], adding up to 1);
    the two agree wherever relevance is nonnegative (the official variant)."""
    if how not in NORMALISATIONS:
        raise ImportanceError(f"normalise {how!r}: choose one of {', '.join(NORMALISATIONS)}")
    if how == "abs":
        M = xp.abs(M)
    s = M.sum(-1, keepdims=True)                             # (..., L, 1)
    zero = xp.abs(s) < 1e-30
    return xp.where(zero, 0.0, M / xp.where(zero, 1.0, s))


# --------------------------------------------------------------------------- LRP relevance
def head_relevance(params, cfg, batches, per_position=True, chunk=None, normalise="sum", rules=None, gates=None):
    """Voita et al. 2019's head relevance (appendix A.3), dict kind -> (L, H), each row (layer) summing to 1:

        rel[l, h] = mean over real target positions t of  r_t[l, h] / sum_h' r_t[l, h'],

    r_t[l, h] the relevance of head h's output neurons when relevance starts at the top-1 logit of step t only.
    ``per_position=True`` (default, the paper's definition): each generation step is its own relevance pass
    (a leading axis T0, ``chunk`` steps per pass; cost ~ T passes per batch). ``per_position=False``: one pass
    from all steps at once, normalising the relevance SUMMED over all steps, i.e. a per-step average weighted
    by how much relevance each step sends through the layer (cheaper; not the paper's). ``normalise``: "sum"
    (the paper's text, signed shares) or "abs" (magnitude shares, |r| / sum |r|; see :func:`_normalise_rows`).
    ``rules``: a :class:`minihead.lrp.Rules` (None: its default, the paper's z-rule, Ding et al. 2017, which
    conserves relevance; signed, so a share can fall outside [0, 1] where a layer's heads nearly cancel);
    ``Rules(linear="official")`` is the official code's variant (alpha = beta = 0.5, bias spread, per-layer
    rescaling; every share in [0, 1]). ``gates``: a pruned model's."""
    _normalise_rows(xp.ones((1, 1)), normalise)              # a bad name fails before any relevance pass
    acc = {k: xp.zeros((cfg.n_layers(k), cfg.n_heads), dtype="float64") for k in KINDS}
    n = 0
    for batch in batches:
        r = lrp.relevance(params, cfg, batch, per_position=per_position, chunk=chunk, gates=gates, rules=rules)
        for k in KINDS:
            if cfg.n_layers(k) == 0:
                continue
            h = r.head[k].astype("float64")                  # (L, B, H) or (L, B, T0, H)
            if per_position:
                real = xp.asarray(batch.tgt_mask).astype("float64")  # (B, T0)
                acc[k] = acc[k] + (_normalise_rows(h, normalise) * real[None, :, :, None]).sum(axis=(1, 2))
            else:
                acc[k] = acc[k] + h.sum(1)
        n += int(xp.asarray(batch.tgt_mask).sum())
    if n == 0:
        raise ImportanceError("head_relevance: no real target positions in the batches")
    return {k: (acc[k] / n if per_position else _normalise_rows(acc[k], normalise)) for k in KINDS}


# --------------------------------------------------------------------------- confidence
def head_confidence(params, cfg, batches):
    """Confidence, dict kind -> (L, H): the mean over real query tokens of the head's largest weight.

    EOS (token id EOS) is left out on both sides, as in :func:`minihead.roles.confidence`: a query
    whose token is EOS is skipped, and the maximum is taken over the keys that are not EOS (without
    renormalising, so weight on EOS lowers confidence); padded queries are skipped, padded keys have
    weight 0. Per attention type, with batches from :mod:`minihead.data.vocab` (source x + EOS, decoder
    input BOS + y):
      enc       queries: source tokens except the final EOS; keys: source tokens except EOS
      dec_self  queries: all real decoder-input tokens (BOS + y, which holds no EOS); keys: the same,
                BOS included (causal)
      dec_enc   queries: all real decoder-input tokens; keys: source tokens except EOS
    The mean is pooled over all query tokens of all batches. On a model without BPE the "enc" row equals
    :func:`minihead.roles.confidence` of :func:`minihead.analysis.encoder_word_maps` (tested): one definition."""
    sums = {k: xp.zeros((cfg.n_layers(k), cfg.n_heads), dtype="float64") for k in KINDS}
    counts = dict.fromkeys(KINDS, 0)
    for batch in batches:
        src, tgt = xp.asarray(batch.src), xp.asarray(batch.tgt_in)
        src_q = xp.asarray(batch.src_mask) & (src != EOS)   # (B, S) queries / keys kept
        tgt_q = xp.asarray(batch.tgt_mask) & (tgt != EOS)   # (B, T)
        _, cache = model.forward(params, cfg, batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)
        sides = {"enc": (cache["enc"]["layers"], "self", src_q, src != EOS),
                 "dec_self": (cache["dec"]["layers"], "self", tgt_q, tgt != EOS),
                 "dec_enc": (cache["dec"]["layers"], "cross", tgt_q, src != EOS)}
        for k, (layers, name, qmask, kmask) in sides.items():
            for l, cl in enumerate(layers):
                A = cl[name]["f"]["A"]                       # (B, H, Tq, Tk)
                top = roles.max_weight(A, kmask[:, None, None, :])   # (B, H, Tq)
                sums[k][l] = sums[k][l] + (top * qmask[:, None, :]).sum(axis=(0, 2))
            counts[k] += int(qmask.sum())
    return {k: sums[k] / max(counts[k], 1) for k in KINDS}


# --------------------------------------------------------------------------- Michel et al. 2019
def michel_importance(params, cfg, batches, per_sentence=False):
    """Michel et al. 2019 (sec. 4.1, eq. 2): I_h = E_x |d L(x) / d xi_h| at head masks xi = 1, each layer
    then divided by its L2 norm over heads; dict kind -> (L, H).

    L is the model's training loss (label-smoothed token-mean cross-entropy, dropout off) via
    ``model.loss_and_grads(..., gates=ones)``. By default the expectation over examples is approximated
    over BATCHES (|gradient of the batch loss|, averaged over batches); ``per_sentence=True`` takes the
    absolute value per sentence (one backward pass per sentence, as in the paper)."""
    acc = {k: xp.zeros((cfg.n_layers(k), cfg.n_heads), dtype="float64") for k in KINDS}
    n = 0
    for batch in batches:
        parts = _split_rows(batch) if per_sentence else [batch]
        for b in parts:
            gates = {k: xp.ones((cfg.n_layers(k), cfg.n_heads), dtype=cfg.dtype) for k in KINDS}
            _, _, info = model.loss_and_grads(params, cfg, b, gates=gates)
            for k in KINDS:
                acc[k] = acc[k] + xp.abs(info["dgates"][k]).astype("float64")
            n += 1
    if n == 0:
        raise ImportanceError("michel_importance: no batches")
    out = {}
    for k in KINDS:
        m = acc[k] / n                                       # (L, H)
        norm = xp.sqrt((m * m).sum(-1, keepdims=True))       # (L, 1)
        out[k] = xp.where(norm > 0, m / xp.where(norm > 0, norm, 1.0), 0.0)
    return out


def _split_rows(batch):
    """One batch per sentence (rows cut to that sentence's lengths; padding is on the right)."""
    src_mask, tgt_mask = xp.asarray(batch.src_mask), xp.asarray(batch.tgt_mask)
    out = []
    for i in range(src_mask.shape[0]):
        S, T = max(int(src_mask[i].sum()), 1), max(int(tgt_mask[i].sum()), 1)
        out.append(SimpleNamespace(src=batch.src[i:i + 1, :S], src_mask=src_mask[i:i + 1, :S],
                                   tgt_in=batch.tgt_in[i:i + 1, :T], tgt_out=batch.tgt_out[i:i + 1, :T],
                                   tgt_mask=tgt_mask[i:i + 1, :T]))
    return out


# --------------------------------------------------------------------------- ablation
def ablation_bleu_drop(params, cfg, vocab, src_sents, ref_sents, kinds=("enc",), translate_fn=None,
                       bleu_fn=None, beam=1):
    """BLEU drop when each single head is switched off (its gate 0, every other gate 1), dict kind ->
    (L, H): BLEU(all heads) - BLEU(without head h of layer l). This is Michel et al. 2019's measure (sec. 3.2,
    "ablating one head"), not one of Voita et al.'s; here it is a check on the relevance ranking.

    ``translate_fn(params, cfg, vocab, src_token_lists, gates=None, beam=1) -> token lists`` and
    ``bleu_fn(hyp_token_lists, ref_token_lists) -> float`` (corpus BLEU) default to
    :func:`minihead.translate.translate` and :func:`minihead.evaluate.bleu`.
    Costs 1 + sum over kinds of L x H translations of ``src_sents``."""
    translate_fn, bleu_fn = translate_fn or translate, bleu_fn or bleu
    if len(src_sents) != len(ref_sents):
        raise ImportanceError(f"ablation_bleu_drop: {len(src_sents)} sources but {len(ref_sents)} references")
    for k in kinds:
        if k not in KINDS:
            raise ImportanceError(f"ablation_bleu_drop: unknown kind {k!r}; choose from {KINDS}")
    base = float(bleu_fn(translate_fn(params, cfg, vocab, src_sents, gates=None, beam=beam), ref_sents))
    out = {}
    for k in kinds:
        L, H = cfg.n_layers(k), cfg.n_heads
        drop = [[0.0] * H for _ in range(L)]
        for l in range(L):
            for h in range(H):
                gates = {kk: xp.ones((cfg.n_layers(kk), H), dtype=cfg.dtype) for kk in KINDS}
                gates[k][l, h] = 0.0
                hyp = translate_fn(params, cfg, vocab, src_sents, gates=gates, beam=beam)
                drop[l][h] = base - float(bleu_fn(hyp, ref_sents))
        out[k] = xp.asarray(drop, dtype="float64")
    return out


# --------------------------------------------------------------------------- comparisons
def average_ranks(a):
    """Ranks 1..n of the entries of ``a`` (flattened), ties sharing the average of their ranks."""
    a = xp.asarray(a, dtype="float64").reshape(-1)
    uniq, inv, counts = xp.unique(a, return_inverse=True, return_counts=True)
    last = xp.cumsum(counts)                                 # (U,) 1-based rank of each value's last copy
    avg = last - (counts - 1) / 2.0                          # (U,) mean of ranks last-c+1 .. last
    return avg[inv.reshape(-1)]


def rank_agreement(a, b):
    """Spearman's rho of two score arrays (flattened): the Pearson correlation of their average ranks
    (Spearman 1904; ties by average rank, as scipy.stats.spearmanr). NaN if either is constant."""
    ra, rb = average_ranks(a), average_ranks(b)
    if ra.shape != rb.shape:
        raise ImportanceError(f"rank_agreement: {ra.size} scores against {rb.size}")
    da, db = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((da * da).sum()) * float((db * db).sum()))
    return float((da * db).sum()) / den if den > 0 else float("nan")


def top_quarter_size(n_heads):
    """How many heads "the top quarter" of a layer of ``n_heads`` is: ceil(H / 4), at least one."""
    return max(1, math.ceil(n_heads / 4))


def uniform_top_quarter_share(n_heads):
    """:func:`top_quarter_share` of a layer whose heads are all equally relevant: ceil(H / 4) / H (0.25 for 4 or 8
    heads, 0.5 for 2, whose top quarter is one head of two)."""
    return top_quarter_size(n_heads) / n_heads


def top_quarter_share(scores):
    """Share of each layer's total carried by its top ceil(H / 4) heads: (L, H) -> (L,).

    The paper's observation "in each layer only a few heads carry most of the relevance"; with rows
    normalised to 1 this is the sum of the largest quarter of the row."""
    s = xp.asarray(scores, dtype="float64")
    k = top_quarter_size(s.shape[-1])
    top = -xp.sort(-s, axis=-1)[..., :k]                     # (L, k) largest first
    tot = s.sum(-1)
    return xp.where(tot != 0, top.sum(-1) / xp.where(tot != 0, tot, 1.0), 0.0)


# --------------------------------------------------------------------------- plots
def plot_importance(relevance, confidence=None, title=None, sort=True, axes=None,
                    relevance_range=None, confidence_range=None):
    """Figure 1 style: one row per layer, heads sorted by relevance within each layer (``sort``), the
    relevance heat map, and beside it the confidence of the same heads in the same order.
    ``relevance`` and ``confidence`` are (L, H). Colours on the fixed scales of :mod:`minihead.figures`
    (``relevance_range`` and ``confidence_range`` override them), so figures of different models compare by
    eye. Returns the matplotlib Figure."""
    rel = backend.to_host(relevance)
    conf = None if confidence is None else backend.to_host(confidence)
    order = (-rel).argsort(-1) if sort else xp.arange(rel.shape[1])[None].repeat(rel.shape[0], 0)
    order = backend.to_host(order)
    ncol = 1 if conf is None else 2
    L, H = rel.shape
    if axes is None:
        fig, axes = figures.new_figure(1, ncol, figsize=(ncol * (0.6 * H + 2.2), 0.5 * L + 1.6))
        axes = axes[0]
    else:
        fig = axes[0].figure
    panels = [("relevance (LRP)", rel, "relevance", relevance_range)]
    if conf is not None:
        panels.append(("confidence", conf, "confidence", confidence_range))
    for ax, (name, M, quantity, rng) in zip(axes, panels):
        Ms = M[[[l] for l in range(M.shape[0])], order]     # (L, H) each row in relevance order
        vmin, vmax = rng or figures.colour_range(quantity)
        im = ax.imshow(Ms, cmap=figures.CMAPS[quantity], vmin=vmin, vmax=vmax, aspect="auto")
        for l in range(Ms.shape[0]):
            for j in range(Ms.shape[1]):
                ax.text(j, l, f"{Ms[l, j]:.2f}\nh{order[l, j]}", ha="center", va="center", fontsize=7,
                        color=figures.cell_text_colour(im, Ms[l, j]))
        figures.integer_ticks(ax, n_x=H, n_y=L, x_labels=[str(j + 1) for j in range(H)] if sort else None)
        ax.set_ylabel("layer")
        ax.set_xlabel("heads, by relevance (rank)" if sort else "head")
        ax.set_title(name)
        fig.colorbar(im, ax=ax)
    if title:
        fig.suptitle(title)
    return fig


def plot_relevance_bars(relevance, title=None, ax=None, ylim=None):
    """Per-layer bars of head relevance (L, H): one group per layer, heads side by side, on the fixed relevance
    scale of :mod:`minihead.figures` (``ylim`` overrides it; widened when a signed share falls outside)."""
    rel = backend.to_host(relevance)
    L, H = rel.shape
    if ax is None:
        _, axes = figures.new_figure(figsize=(max(4.0, 0.35 * L * H + 1.5), 3.2))
        ax = axes[0, 0]
    width = 0.8 / H
    for h in range(H):
        ax.bar([l + (h - (H - 1) / 2) * width for l in range(L)], rel[:, h], width, label=f"head {h}")
    figures.integer_ticks(ax, n_x=L)
    lo, hi = ylim or figures.RELEVANCE_RANGE
    ax.set_ylim(min(lo, float(rel.min()) * 1.05), max(hi, float(rel.max()) * 1.05))
    ax.set_xlabel("layer")
    ax.set_ylabel("relevance share")
    if H <= 8:
        ax.legend(fontsize=7, ncol=min(H, 4))
    if title:
        ax.set_title(title)
    return ax
