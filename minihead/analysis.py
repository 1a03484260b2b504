"""Head roles of a trained model: attention maps over words, one report, and the ``roles`` command.

Voita et al. 2019, sec. 5 read the encoder self-attention of a trained NMT model on sentences with
gold dependency trees. This module runs the encoder (evaluation mode: no dropout) over such
sentences, cuts each sentence's real rows and columns out of the padded batch, drops EOS, folds BPE
pieces back into words (:func:`minihead.roles.aggregate_attention`) and hands the word-level maps to
the measures of :mod:`minihead.roles` (confidence, positional shares, syntactic accuracy against the
offset baseline, rare-word shares, roles). Layers and heads are 0-based, as in :mod:`minihead.roles`.

Functions: :func:`encoder_word_maps`, :func:`decoder_maps`, :func:`unknown_words`,
:func:`head_roles` (-> :class:`RolesReport`), :func:`format_positional`, :func:`format_table`,
:func:`format_rare`, :func:`plot_scores`, :func:`plot_sentence`, :func:`save_figures`,
:func:`add_roles_command` / :func:`cmd_roles` (``python -m minihead roles``).
"""
import os
from dataclasses import dataclass

from . import backend, figures, roles
from .backend import xp
from .data.bpe import CONT, piece_to_word
from .data.vocab import UNK, batches
from .errors import DataError
from .model import encoder_forward, forward


class AnalysisError(DataError):
    """Sentences, files or settings the role analysis cannot use (a DataError, so also a ValueError)."""


# ----------------------------------------------------------------------------------------------
# Attention extraction

def _segment(words, bpe, i):
    """(model tokens, piece -> word index or None) of one sentence; checks that no word is lost."""
    if not words:
        raise AnalysisError(f"sentence {i}: no tokens")
    for k, w in enumerate(words):
        if not isinstance(w, str) or not w:
            raise AnalysisError(f"sentence {i}, word {k + 1}: empty or non-string token {w!r}")
    if bpe is None:
        return list(words), None
    pieces = bpe.segment(words)
    p2w = piece_to_word(pieces)
    # A word that itself ends in "@@" would glue onto the next one and shift every later word.
    if not pieces or p2w[-1] + 1 != len(words) or pieces[-1].endswith(CONT):
        raise AnalysisError(f"sentence {i}: BPE segmentation of {len(words)} words gives pieces of "
                            f"{p2w[-1] + 1 if pieces else 0} words (a token ending in {CONT!r}?)")
    return pieces, p2w


def encoder_word_maps(params, cfg, vocab, src_token_lists, bpe=None, from_word="first",
                      max_tokens=4000, gates=None):
    """Encoder self-attention of every sentence over its words: a list of (L, H, W, W) arrays.

    The encoder sees each sentence as ``vocab.encode(tokens) + [EOS]`` (unknown tokens become UNK
    and keep their position), batched by :func:`minihead.data.vocab.batches` and run without dropout.
    Per sentence the real rows and columns are kept and the EOS row and column dropped; rows are not
    renormalised, so a row sums to 1 minus the weight its query put on EOS (the convention of
    :mod:`minihead.roles`). With a ``bpe`` model the words are segmented first and the piece maps
    folded back into words by :func:`minihead.roles.aggregate_attention`: attention TO a word sums
    over its pieces, attention FROM a word is its first piece's row (``from_word="first"``) or the
    mean of its pieces' rows (``"mean"``). ``gates``: the head gates of a pruned model (its heads' outputs
    scaled as in training; a closed head still has a map). Returned in input order, as backend (xp) arrays.
    """
    if from_word not in ("first", "mean"):
        raise AnalysisError(f"from_word must be 'first' or 'mean', got {from_word!r}")
    sents = [list(s) for s in src_token_lists]
    if not sents:
        raise AnalysisError("encoder_word_maps: no sentences")
    segmented = [_segment(s, bpe, i) for i, s in enumerate(sents)]
    src_ids = [vocab.encode(pieces) for pieces, _ in segmented]
    out = [None] * len(sents)
    for batch in batches(src_ids, [[] for _ in src_ids], max_tokens):
        _, cache = encoder_forward(params, cfg, batch.src, batch.src_mask, gates)  # rng=None: no dropout
        A = xp.stack([c["self"]["f"]["A"] for c in cache["layers"]], axis=1)    # (B, L, H, S, S)
        for row, i in enumerate(batch.index):
            n = len(src_ids[i])                    # real tokens; EOS sits at column n, padding after
            a = A[row, :, :, :n, :n]                                              # (L, H, n, n)
            if bpe is None:
                out[i] = a.copy()                  # a copy, so the batch array can be freed
            else:
                out[i] = roles.aggregate_attention(a, segmented[i][1], len(sents[i]),
                                                   from_word)                       # (L, H, W, W)
    return out


def decoder_maps(params, cfg, vocab, src_token_lists, tgt_token_lists, max_tokens=4000):
    """Teacher-forced decoder attention of every sentence pair, on model tokens (no word folding).

    Returns a list of dicts ``{"self": (L, H, T, T), "cross": (L, H, T, S)}``: the T = len(y) + 1
    queries are the decoder inputs BOS + y (the positions that predict y + EOS), self-attention keys
    the same (causal, so the upper triangle is 0), cross-attention keys the S = len(x) source tokens
    with the source EOS column dropped (rows not renormalised). Unknown tokens become UNK.
    """
    if len(src_token_lists) != len(tgt_token_lists):
        raise AnalysisError(f"decoder_maps: {len(src_token_lists)} sources but "
                            f"{len(tgt_token_lists)} targets")
    src_ids = [vocab.encode(s) for s in src_token_lists]
    tgt_ids = [vocab.encode(t) for t in tgt_token_lists]
    out = [None] * len(src_ids)
    for batch in batches(src_ids, tgt_ids, max_tokens):
        _, cache = forward(params, cfg, batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)
        layers = cache["dec"]["layers"]
        A_self = xp.stack([c["self"]["f"]["A"] for c in layers], axis=1)        # (B, L, H, T, T)
        A_cross = xp.stack([c["cross"]["f"]["A"] for c in layers], axis=1)      # (B, L, H, T, S)
        for row, i in enumerate(batch.index):
            n, t = len(src_ids[i]), len(tgt_ids[i]) + 1
            out[i] = {"self": A_self[row, :, :, :t, :t].copy(),                   # (L, H, T, T)
                      "cross": A_cross[row, :, :, :t, :n].copy()}                 # (L, H, T, S)
    return out


def unknown_words(vocab, src_token_lists, bpe=None):
    """(sentence, word) index pairs of the words the vocabulary cannot represent at all: every one
    of their model tokens (the word itself, or all its BPE pieces) is UNK."""
    out = []
    for i, words in enumerate(src_token_lists):
        pieces, p2w = _segment(list(words), bpe, i)
        ids = vocab.encode(pieces)
        known = [False] * len(words)
        for p, tok in enumerate(ids):
            known[p if p2w is None else p2w[p]] |= tok != UNK
        out.extend((i, k) for k, ok in enumerate(known) if not ok)
    return out


# ----------------------------------------------------------------------------------------------
# The report

@dataclass
class RolesReport:
    """Everything chapter 3 and the ``roles`` command show; arrays (L, H) are backend arrays."""
    n_layers: int
    n_heads: int
    words: list            # token list of every sentence (the trees' forms, as given to the model)
    maps: list             # (L, H, W, W) encoder self-attention over words, per sentence
    confidence: object     # (L, H) mean largest weight (roles.confidence)
    shares: object         # (L, H, 2) argmax at offset -1 / +1, over all queries (shown beside)
    shares_possible: object  # (L, H, 2) the same over the queries where the offset exists (the criterion)
    positional: dict       # {(l, h): -1 or +1} at the 0.9 threshold (on ``shares_possible``)
    acc: dict              # {(rel, dir): (L, H)} syntactic accuracy per query token
    counts: dict           # {(rel, dir): query tokens with a relative}
    baseline: dict         # {(rel, dir): best fixed-offset accuracy}
    offsets: dict          # {(rel, dir): that offset}
    syntactic: dict        # {(rel, dir): [(l, h), ...]} heads >= baseline + 10 points, best first
    table: list            # roles.Table1Row per (rel, dir)
    rare: object           # roles.RareShares, or None when no sentence qualifies
    roles: dict            # {(l, h): set of "positional" / "syntactic" / "rare"}
    n_words: int
    n_unknown: int         # words whose every model token is UNK

    def syntactic_margin(self):
        """(L, H): each head's best accuracy minus baseline over the (relation, direction) pairs."""
        margins = [self.acc[k] - self.baseline[k] for k in self.acc]
        return xp.max(xp.stack(margins), axis=0)                                  # (L, H)

    def heads_with(self, role):
        """Sorted (l, h) of the heads that have ``role``."""
        return sorted(lh for lh, r in self.roles.items() if role in r)


def head_roles(params, cfg, vocab, trees, src_freq, bpe=None, top_n=None, from_word="first",
               max_tokens=4000, match="exact", gates=None):
    """Run the whole analysis of Voita et al. 2019, sec. 5 on gold ``trees`` (Sentence objects).

    ``src_freq``: training frequency of each source WORD, keyed like the trees' forms (case
    included; unseen = 0) -- word counts, not BPE piece counts, since the maps are over words;
    None skips the rare-word measure (``rare`` is then None).
    ``top_n``: the N of "rarest token outside the N most frequent" (default the paper's 500; pass
    :func:`minihead.roles.default_top_n` of the vocabulary for the same fraction of it). ``match``:
    label matching of :func:`minihead.roles.dependency_arcs` ("exact": ``nsubj`` without
    ``nsubj:pass``). Positional heads are judged on the queries where the offset exists
    (``shares_possible``, :func:`minihead.roles.positional_shares`' default), the all-queries ``shares`` shown
    beside; syntactic accuracy and its offset baseline count query tokens (sec. 5.2). ``gates``: a pruned
    model's head gates (its roles re-measured as pruned, Figure 8).
    """
    trees = list(trees)
    if not trees:
        raise AnalysisError("head_roles: no trees")
    if src_freq is not None and bpe is not None and any(str(k).endswith(CONT) for k in src_freq):
        raise AnalysisError(f"head_roles: src_freq has BPE pieces (keys ending in {CONT!r}); "
                            f"give word frequencies of the training source")
    words = [list(t.tokens) for t in trees]
    maps = encoder_word_maps(params, cfg, vocab, words, bpe, from_word, max_tokens, gates)
    confidence = roles.confidence(maps)
    shares = roles.positional_shares(maps, possible_only=False)
    shares_possible = roles.positional_shares(maps, possible_only=True)
    acc, counts = roles.syntactic_accuracy(maps, trees, match=match)
    baseline, offsets = roles.offset_baseline(trees, match=match)
    rare = None
    if src_freq is not None:
        try:
            rare = roles.rare_token_shares(maps, words, src_freq, top_n=top_n)
        except roles.RolesError as exc:
            if "no sentence" not in str(exc):   # too few rare words is a finding, not an error
                raise
    return RolesReport(
        n_layers=cfg.n_enc_layers, n_heads=cfg.n_heads, words=words, maps=maps,
        confidence=confidence, shares=shares, shares_possible=shares_possible,
        positional=roles.positional_heads(shares_possible), acc=acc, counts=counts, baseline=baseline,
        offsets=offsets, syntactic=roles.syntactic_heads(acc, baseline),
        table=roles.table1(acc, baseline, counts), rare=rare,
        roles=roles.classify_heads(shares_possible, acc, baseline, rare),
        n_words=sum(len(w) for w in words), n_unknown=len(unknown_words(vocab, words, bpe)))


# ----------------------------------------------------------------------------------------------
# Tables

def _roles_text(report, lh):
    return ", ".join(sorted(report.roles[lh])) or "-"


def format_positional(report):
    """Markdown: per head its confidence, the argmax shares at -1 and +1 over the queries where the offset
    exists (the criterion), in brackets over all queries, and its roles."""
    conf, sh, shp = (backend.to_host(a) for a in (report.confidence, report.shares,
                                                  report.shares_possible))
    lines = ["| layer | head | confidence | share -1 | share +1 | roles |", "|---|---|---|---|---|---|"]
    for l in range(report.n_layers):
        for h in range(report.n_heads):
            lines.append(f"| {l} | {h} | {conf[l, h]:.2f} | {shp[l, h, 0]:.2f} ({sh[l, h, 0]:.2f}) "
                         f"| {shp[l, h, 1]:.2f} ({sh[l, h, 1]:.2f}) | {_roles_text(report, (l, h))} |")
    return "\n".join(lines)


def format_table(report, paper=roles.PAPER_TABLE1):
    """Table 1 of the paper with our best head / baseline beside the paper's numbers."""
    return roles.format_table1(report.table, paper)


def format_rare(report, layers=None):
    """Markdown: per head (of ``layers``, default all) how often its most-attended word is the
    sentence's rarest and one of its two rarest, with the chance levels (mean 1/T and 2/T)."""
    r = report.rare
    if r is None:
        return ("(no rare-word table: no word frequencies were given, or no sentence has its rarest "
                "word outside the most frequent ones)")
    first, two = backend.to_host(r.rarest), backend.to_host(r.two_rarest)
    lines = [f"{r.n_sentences} sentences whose rarest word is outside the {r.top_n} most frequent; "
             f"chance: rarest {100 * r.chance_rarest:.1f}%, one of two rarest {100 * r.chance_two:.1f}%",
             "", "| layer | head | rarest % | one of two rarest % | roles |", "|---|---|---|---|---|"]
    for l in (range(report.n_layers) if layers is None else layers):
        for h in range(report.n_heads):
            lines.append(f"| {l} | {h} | {100 * first[l, h]:.1f} | {100 * two[l, h]:.1f} | "
                         f"{_roles_text(report, (l, h))} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Figures (matplotlib imported inside, so the module imports without it)

def plot_scores(report, axes=None):
    """Four per-head heat maps: confidence, the larger positional share, the best syntactic
    accuracy minus its baseline (points), the rarest-word share, each on its fixed range of
    :mod:`minihead.figures` (the same in every chapter). Returns the matplotlib Figure."""
    w = 0.7 * report.n_heads + 2.0
    if axes is None:
        _, axes = figures.new_figure(1, 4, figsize=(4 * w, 0.5 * report.n_layers + 2.0))
        axes = axes[0]
    wrap = lambda text: figures.wrap_title(text, 12 * w)     # noqa: E731  (a panel's width in characters)
    roles.plot_head_scores(report.confidence, wrap("confidence"), ax=axes[0], quantity="confidence")
    roles.plot_head_scores(xp.max(report.shares_possible, axis=-1),
                           wrap("positional share (max of -1, +1; offset exists)"), ax=axes[1], quantity="share")
    roles.plot_head_scores(100 * report.syntactic_margin(), wrap("syntactic: best acc - baseline (pts)"),
                           ax=axes[2], fmt="{:.0f}", quantity="margin_points")
    if report.rare is not None:
        roles.plot_head_scores(report.rare.rarest, wrap(f"rarest-word share (chance "
                               f"{report.rare.chance_rarest:.2f})"), ax=axes[3], quantity="share")
    else:
        axes[3].set_axis_off()
    for ax in axes:
        ax.title.set_fontsize(10)
    fig = axes[0].figure
    if fig.get_layout_engine() is None:      # a caller's own figure without a layout engine, as before
        fig.tight_layout()
    return fig


def plot_sentence(report, index=0, max_words=25):
    """Every head's attention map on sentence ``index`` (a grid layers x heads, roles in the
    titles), on the fixed attention range 0..1. Returns the matplotlib Figure."""
    maps = backend.to_host(report.maps[index])                                    # (L, H, W, W)
    words = report.words[index][:max_words]
    n = len(words)
    L, H = report.n_layers, report.n_heads
    cell = 0.16 * n + 1.2
    fig, axes = figures.new_figure(L, H, figsize=(H * cell, L * cell + 0.3))
    for l in range(L):
        for h in range(H):
            ax = axes[l][h]
            roles.plot_attention(maps[l, h, :n, :n], words, ax=ax,
                                 title=figures.wrap_title(f"L{l} H{h}: {_roles_text(report, (l, h))}", 14 * cell))
            ax.title.set_fontsize(8)
            ax.tick_params(labelsize=6)
            ax.set_xlabel("")
            ax.set_ylabel("")
    return fig


def save_figures(report, out_dir, index=0):
    """Write head_scores.png (:func:`plot_scores`) and heads_sentence<index>.png
    (:func:`plot_sentence`) into ``out_dir``; returns their paths."""
    import matplotlib   # here: the package imports without matplotlib; only saving figures needs it
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, fig in (("head_scores.png", plot_scores(report)),
                      (f"heads_sentence{index}.png", plot_sentence(report, index))):
        path = os.path.join(out_dir, name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


# ----------------------------------------------------------------------------------------------
# Command line: python -m minihead roles CHECKPOINT [--conllu FILE] [--bpe FILE] [--out DIR]


