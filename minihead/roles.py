"""What encoder self-attention heads do: Voita et al. 2019, section 5 ("characterizing heads").

Every measure reads attention maps over the WORDS of a sentence: ``maps`` is a list over sentences of
arrays (L, H, T, T) = (layer, head, query word, key word), special tokens (EOS) already removed from rows
and columns by the caller and the rows NOT renormalised. A head's "most-attended token" for a query is
the argmax of its row; on ties the first (leftmost) maximum wins (``xp.argmax``). Layers and heads are
0-based everywhere in this module.

Functions: :func:`confidence`; :func:`positional_shares` / :func:`positional_heads` (sec. 5.1);
:func:`dependency_arcs`, :func:`query_answers`, :func:`syntactic_accuracy`, :func:`offset_baseline`, :func:`syntactic_heads`,
:func:`table1`, :func:`format_table1` (sec. 5.2, Table 1); :func:`rare_token_shares` (sec. 5.3);
:func:`classify_heads` (the roles of Figure 8); :func:`aggregate_attention` (BPE pieces -> words);
:func:`plot_head_scores`, :func:`plot_attention`.
"""
from collections import Counter
from typing import NamedTuple

from . import backend, figures, paper
from .backend import xp
from .errors import DataError

RELATIONS = ("nsubj", "obj", "amod", "advmod")   # UD v2 "obj" is the paper's "dobj"
DIRECTIONS = ("head->dep", "dep->head")          # query = head word / query = dependent

# The paper's names for the directions of Table 1 (governor -> dependent and back).
DIRECTION_NAMES = {
    ("nsubj", "head->dep"): "verb->subject", ("nsubj", "dep->head"): "subject->verb",
    ("obj", "head->dep"): "verb->object", ("obj", "dep->head"): "object->verb",
    ("amod", "head->dep"): "noun->adjective", ("amod", "dep->head"): "adjective->noun",
    ("advmod", "head->dep"): "verb->adverb", ("advmod", "dep->head"): "adverb->verb",
}

# Voita et al. 2019, Table 1 (EN-RU; best head / most-frequent-offset baseline, in PERCENT), as
# transcribed in minihead.paper from shared/paper/voita2019.md, whose numbers are marked approximate (~).
PAPER_TABLE1 = paper.TABLE1

_EPS = 1e-9              # tolerance for ">= threshold" comparisons of shares (0.45 >= 0.35 + 0.10)


class RolesError(DataError):
    """Attention maps, trees or token lists that the role measures cannot use (a DataError, so
    also a ValueError)."""


def _where(i, sentence=None):
    """'sentence 12 (id weblog-3, line 40)' for error messages: the index, plus the sentence's
    ``meta["sent_id"]`` and first source line when the tree comes from ``read_conllu``."""
    extra = []
    meta = getattr(sentence, "meta", None) or {}
    if meta.get("sent_id"):
        extra.append(f"id {meta['sent_id']}")
    lines = getattr(sentence, "line_numbers", None)
    if lines:
        extra.append(f"line {lines[0]}")
    return f"sentence {i}" + (f" ({', '.join(extra)})" if extra else "")


# ----------------------------------------------------------------------------------------------
# Shared preparation: argmax and max of every query row, all sentences concatenated.

def max_weight(A, key_mask=None):
    """The largest attention weight of each query row, (..., Tq) from weights A (..., Tq, Tk): the quantity whose
    mean over query tokens is a head's confidence (Voita et al. 2019, sec. 4). ``key_mask`` (broadcast to A, bool)
    leaves keys out; their weight counts as 0 and the row is not renormalised, so weight on a left-out key (EOS)
    lowers the confidence. :func:`confidence` (word maps) and :func:`minihead.importance.head_confidence` (every
    attention type of a model) both take their maximum here."""
    return (A if key_mask is None else xp.where(key_mask, A, 0.0)).max(-1)


class _Rows(NamedTuple):
    argmax: object    # (L, H, N) int: most-attended key of each query, index within its sentence
    top: object       # (L, H, N) float: the largest weight of each query row
    lengths: list     # T of each sentence
    starts: object    # (S,) int: offset of each sentence's first token in the N axis
    pos: object       # (N,) int: position of each query token within its sentence


def _check_maps(maps):
    """The maps as backend arrays, after checking shapes; raises RolesError naming the sentence."""
    maps = list(maps)
    if not maps:
        raise RolesError("maps: empty list of attention maps")
    arrays, lh = [], None
    for i, a in enumerate(maps):
        a = xp.asarray(a)
        if a.ndim != 4 or a.shape[2] != a.shape[3] or a.shape[2] < 1:
            raise RolesError(f"maps, {_where(i)}: expected (L, H, T, T) with T >= 1, got shape "
                             f"{tuple(a.shape)}")
        if lh is None:
            lh = a.shape[:2]
        elif a.shape[:2] != lh:
            raise RolesError(f"maps, {_where(i)}: (L, H) = {tuple(a.shape[:2])} differs from "
                             f"{tuple(lh)} of sentence 0")
        arrays.append(a)
    return arrays


def _rows(maps):
    """Row statistics of all sentences; one argmax and one max per sentence, then concatenation."""
    arrays = _check_maps(maps)
    lengths = [a.shape[-1] for a in arrays]
    argmax = xp.concatenate([xp.argmax(a, axis=-1) for a in arrays], axis=-1)   # (L, H, N)
    top = xp.concatenate([max_weight(a) for a in arrays], axis=-1)              # (L, H, N)
    if not bool(xp.isfinite(top).all()):   # NaN propagates into the row max, so this finds it
        bad = next(i for i, a in enumerate(arrays) if not bool(xp.isfinite(a).all()))
        raise RolesError(f"maps, {_where(bad)}: attention weights contain NaN or inf")
    lengths_d = xp.asarray(lengths)                                               # (S,)
    ends = xp.cumsum(lengths_d)                                                   # (S,)
    starts = ends - lengths_d                                                     # (S,)
    flat = xp.arange(int(ends[-1]))                                               # (N,)
    sent_of = xp.searchsorted(ends, flat, side="right")                           # (N,)
    pos = flat - starts[sent_of]                                                  # (N,)
    return _Rows(argmax, top, lengths, starts, pos)


# ----------------------------------------------------------------------------------------------
# Confidence and positional heads (sec. 5.1)

def confidence(maps):
    """Confidence of each head: the mean over query tokens of its largest attention weight.

    Voita et al. 2019, sec. 4 (important heads): the head's maximum attention weight averaged over
    the tokens of the dev set, the end-of-sentence symbol excluded. Here EOS is left out on both sides, because the caller strips its row and its
    column; the rows are not renormalised, so weight a head puts on EOS lowers its confidence. The
    mean is pooled over all query tokens of all sentences (long sentences weigh more).
    Returns (L, H).
    """
    rows = _rows(maps)
    return rows.top.mean(axis=-1)                                                # (L, H)


def positional_shares(maps, possible_only=True):
    """Share of query tokens whose most-attended token sits at relative position -1 and at +1.

    Sec. 5.1: a head is positional when its largest weight lands on the same relative position in
    at least 90% of cases. Denominator (default, ``possible_only=True``): the query tokens where that
    offset exists (position >= 1 for -1, <= T - 2 for +1), so the verdict does not depend on sentence
    length. ``possible_only=False`` divides by ALL query tokens (shown beside it): then even a perfect
    previous-token head scores (N - S) / N, its first word having no left neighbour, i.e. only 11/12 =
    0.92 on 12-word sentences (EWT dev averages 12.6), where one slip in 40 drops it below the paper's
    0.9, against ~0.96 on the paper's 24-token WMT sentences. Returns (L, H, 2): [..., 0] for -1,
    [..., 1] for +1.
    """
    rows = _rows(maps)
    offset = rows.argmax - rows.pos                                              # (L, H, N)
    n_sent = len(rows.lengths)
    shares = []
    for k, d in enumerate((-1, 1)):
        hits = (offset == d).sum(axis=-1)                                        # (L, H)
        if possible_only:
            # Each sentence of length T has T - 1 queries with a left (right) neighbour.
            denom = offset.shape[-1] - n_sent
        else:
            denom = offset.shape[-1]
        shares.append(hits / max(denom, 1))
    return xp.stack(shares, axis=-1)                                             # (L, H, 2)


def positional_heads(shares, threshold=paper.POSITIONAL["threshold"], confidence=None,
                     min_confidence=paper.POSITIONAL["min_confidence"]):
    """Heads whose share of one offset reaches ``threshold`` (sec. 5.1: 90%) and, when the heads' ``confidence``
    ((L, H), :func:`confidence`) is given, whose confidence exceeds ``min_confidence`` (every positional head of
    the paper has confidence above 0.8; :func:`minihead.findings.positional` judges by both).

    Returns {(layer, head): offset}, offset -1 or +1 (the larger share if both qualify).
    """
    shares = backend.to_host(shares)                                            # (L, H, 2)
    conf = None if confidence is None else backend.to_host(confidence)          # (L, H)
    out = {}
    for l in range(shares.shape[0]):
        for h in range(shares.shape[1]):
            k = int(shares[l, h].argmax())
            if shares[l, h, k] >= threshold - _EPS and (conf is None or conf[l, h] > min_confidence):
                out[(l, h)] = (-1, 1)[k]
    return out


# ----------------------------------------------------------------------------------------------
# Syntactic heads (sec. 5.2, Table 1)

def _label(deprel, match):
    return deprel if match == "exact" else deprel.split(":")[0]


def dependency_arcs(sentences, relations=RELATIONS, match="exact"):
    """Arcs of the gold trees as (sentence, query, answer) word indices (0-based), per (rel, dir).

    "head->dep": query = head word, answer = the dependent; "dep->head": the reverse. Arcs to the
    root (head 0) are skipped. ``match="exact"`` compares the whole UD label, so ``nsubj`` leaves out
    ``nsubj:pass`` -- as the paper's Stanford-style labels keep ``nsubjpass`` apart, and the only
    convention that gives the realdata README's baselines (EWT dev nsubj: 1,958 arcs, 0.365);
    ``match="base"`` compares the part before ':' (``Sentence.rel(i)``; nsubj then has 2,137 arcs,
    baseline 0.339). Sentences need ``tokens``, ``heads`` (1-based, 0 = root) and ``deprels``.
    Returns {(rel, dir): list of (s, q, a)} with every (rel, dir) of ``relations`` present.
    """
    if match not in ("exact", "base"):
        raise RolesError(f"match must be 'exact' or 'base', got {match!r}")
    wanted = set(relations)
    arcs = {(r, d): [] for r in relations for d in DIRECTIONS}
    for s, sent in enumerate(sentences):
        n = len(sent.tokens)
        if len(sent.heads) != n or len(sent.deprels) != n:
            raise RolesError(f"trees, {_where(s, sent)}: {n} tokens but {len(sent.heads)} heads "
                             f"and {len(sent.deprels)} deprels")
        for i, (head, deprel) in enumerate(zip(sent.heads, sent.deprels)):
            if not 0 <= head <= n:
                lines = getattr(sent, "line_numbers", None)
                at = f"line {lines[i]}" if lines else f"word {i + 1}"
                raise RolesError(f"trees, {_where(s, sent)}, {at}: head {head} outside 0..{n}")
            rel = _label(deprel, match)
            if rel in wanted and head != 0:
                arcs[(rel, "head->dep")].append((s, head - 1, i))
                arcs[(rel, "dep->head")].append((s, i, head - 1))
    return arcs


def query_answers(sentences, relations=RELATIONS, match="exact"):
    """The arcs of :func:`dependency_arcs` grouped by query token: {(rel, dir): {(s, q): sorted answers}}, e.g.
    a noun with two adjectives is ONE amod noun->adjective query with two answers."""
    out = {}
    for key, arcs in dependency_arcs(sentences, relations, match).items():
        grouped = {}
        for s, q, a in arcs:
            grouped.setdefault((s, q), set()).add(a)
        out[key] = {sq: sorted(a) for sq, a in sorted(grouped.items())}
    return out


def syntactic_accuracy(maps, sentences, relations=RELATIONS, match="exact", per="query"):
    """Accuracy of every head on every (relation, direction) (sec. 5.2).

    ``per="query"`` (default, the paper's): for each query token that has at least one relative in the
    relation, a hit when the argmax of its row (EOS already cut) is ANY of those relatives; accuracy =
    hits / such query tokens. ``per="arc"``: one trial per arc (a noun with two adjectives is two trials
    of which at most one can succeed, so the ceiling drops below 1).
    Returns (acc, counts): acc = {(rel, dir): (L, H)} for the keys with at least one query;
    counts = {(rel, dir): number of query tokens (or arcs)} for all keys. See :func:`dependency_arcs`
    for ``match``.
    """
    if per not in ("query", "arc"):
        raise RolesError(f"per must be 'query' or 'arc', got {per!r}")
    sentences = list(sentences)
    rows = _rows(maps)
    if len(sentences) != len(rows.lengths):
        raise RolesError(f"{len(rows.lengths)} attention maps but {len(sentences)} trees")
    for s, (sent, t) in enumerate(zip(sentences, rows.lengths)):
        if len(sent.tokens) != t:
            raise RolesError(f"{_where(s, sent)}: attention map over {t} words but the tree has "
                             f"{len(sent.tokens)}")
    starts = backend.to_host(rows.starts).tolist()
    acc, counts = {}, {}
    if per == "arc":
        groups = {key: [((s, q), [a]) for s, q, a in arcs]
                  for key, arcs in dependency_arcs(sentences, relations, match).items()}
    else:
        groups = {key: list(qa.items()) for key, qa in query_answers(sentences, relations, match).items()}
    for key, items in groups.items():
        counts[key] = len(items)
        if not items:
            continue
        width = max(len(a) for _, a in items)
        query = xp.asarray([starts[s] + q for (s, q), _ in items])                  # (n_q,)
        answers = xp.asarray([a + [-1] * (width - len(a)) for _, a in items])       # (n_q, width), -1 = none
        picked = rows.argmax[:, :, query]                                           # (L, H, n_q)
        hit = (picked[..., None] == answers).any(axis=-1)                           # (L, H, n_q)
        acc[key] = hit.mean(axis=-1)                                                # (L, H)
    return acc, counts


def offset_baseline(sentences, relations=RELATIONS, match="exact", per="query"):
    """The best fixed relative offset per (relation, direction) (sec. 5.2, Table 1 "baseline").

    Counted as :func:`syntactic_accuracy` counts: ``per="query"`` (default), the offset d is a hit on a
    query token when the token at q + d is any of its relatives, and the baseline is the largest share of
    query tokens any single d hits; ``per="arc"``, the most frequent offset answer - query over the arcs
    (then the two directions mirror each other, d <-> -d, with equal baselines; per query they need not:
    a noun with two adjectives is one noun->adjective query but two adjective->noun queries).
    Ties: the smaller |offset|, then the negative one.
    Returns (baseline, offsets): {(rel, dir): share} and {(rel, dir): offset}, keys with queries only.
    """
    if per not in ("query", "arc"):
        raise RolesError(f"per must be 'query' or 'arc', got {per!r}")
    baseline, offsets = {}, {}
    if per == "arc":
        trials = {key: [[a - q] for _, q, a in arcs]
                  for key, arcs in dependency_arcs(sentences, relations, match).items()}
    else:
        trials = {key: [sorted({a - q for a in ans}) for (_, q), ans in qa.items()]
                  for key, qa in query_answers(sentences, relations, match).items()}
    for key, offs in trials.items():
        if not offs:
            continue
        tally = Counter(d for ds in offs for d in ds)      # per query: each of its offsets once
        best = min(tally, key=lambda d: (-tally[d], abs(d), d))
        offsets[key] = best
        baseline[key] = tally[best] / len(offs)
    return baseline, offsets


def syntactic_heads(acc, baseline, margin=paper.SYNTACTIC_MARGIN):
    """Heads syntactic for a (relation, direction): accuracy >= baseline + margin (sec. 5.2: 10 points).

    Returns {(rel, dir): [(layer, head), ...]}, best first (ties in row-major order), every key of
    ``acc`` present (possibly with an empty list).
    """
    out = {}
    for key, a in acc.items():
        a = backend.to_host(a)
        heads = [(l, h) for l in range(a.shape[0]) for h in range(a.shape[1])
                 if a[l, h] >= baseline[key] + margin - _EPS]
        out[key] = sorted(heads, key=lambda lh: -a[lh])
    return out


class Table1Row(NamedTuple):
    relation: str
    direction: str
    head: tuple        # (layer, head), 0-based
    accuracy: float    # best head's accuracy
    baseline: float    # best fixed offset's accuracy
    n_queries: int     # query tokens with a relative in the relation (arcs, if counted per arc)


def table1(acc, baseline, counts):
    """Table 1: for each (relation, direction), the best head, its accuracy and the baseline.

    Rows in the order RELATIONS x DIRECTIONS (then any other keys); best head = argmax of the
    accuracy, the first in row-major order on ties.
    """
    order = [(r, d) for r in RELATIONS for d in DIRECTIONS]
    keys = [k for k in order if k in acc] + [k for k in acc if k not in order]
    rows = []
    for key in keys:
        a = backend.to_host(acc[key])
        l, h = divmod(int(a.argmax()), a.shape[1])
        rows.append(Table1Row(key[0], key[1], (l, h), float(a[l, h]), float(baseline[key]),
                              int(counts[key])))
    return rows


def format_table1(rows, paper=None):
    """Markdown for :func:`table1` rows, in percent; with ``paper`` (e.g. :data:`PAPER_TABLE1`), one
    "best / baseline" column per corpus of the paper beside ours."""
    corpora = []
    if paper:
        corpora = list(next(iter(paper.values())).keys())
    head = ["relation", "direction", "queries", "best head (layer, head)", "ours: best / baseline"]
    head += [f"paper {c}: best / baseline" for c in corpora]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        key = (r.relation, r.direction)
        name = DIRECTION_NAMES.get(key, r.direction)
        cells = [r.relation, name, str(r.n_queries), f"({r.head[0]}, {r.head[1]})",
                 f"{100 * r.accuracy:.1f} / {100 * r.baseline:.1f}"]
        for c in corpora:
            p = paper.get(key, {}).get(c)
            cells.append(f"{p[0]} / {p[1]}" if p else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Rare-word heads (sec. 5.3)

def default_top_n(vocab_size):
    """The paper's 500-of-32k scaled by rank: ``max(1, round(500 * V / 32000))`` = V / 64.

    Scaling the rank keeps the same fraction of the vocabulary "frequent". On Multi30k train
    (English, ~9.8k word types) it gives 153, whose tokens cover ~72% of the running words.
    """
    return max(1, round(paper.RARE["top_n"] * vocab_size / paper.SETTING["bpe"]))


class RareShares(NamedTuple):
    rarest: object          # (L, H): share of queries whose argmax is the rarest token
    two_rarest: object      # (L, H): ... is one of the two rarest tokens
    chance_rarest: float    # mean over the same queries of 1 / T
    chance_two: float       # mean over the same queries of 2 / T
    n_sentences: int        # sentences used
    top_n: int              # the N of "outside the N most frequent"


def rare_token_shares(maps, sentences, freqs, top_n=None, vocab_size=None):
    """How often each head's most-attended token is the sentence's rarest, or one of its two rarest
    (sec. 5.3: 66% / 83% for the OpenSubtitles rare-word head).

    ``sentences``: token lists, or objects with ``tokens``, matching the maps' words; ``freqs``:
    training frequency of each token (source side; unseen = 0; keys must match the tokens as
    given, case included). Rarest = lowest frequency, ties to the first occurrence; the second
    rarest likewise among the rest. Used: sentences of >= 2 words whose rarest token is outside
    the ``top_n`` most frequent training tokens (ranked by count, ties by the token string);
    ``top_n`` defaults to the paper's 500 (sec. 5.3); with ``vocab_size`` it is :func:`default_top_n` of it (the
    same FRACTION of the vocabulary as the paper's 500 of 32k, an option for small vocabularies). Shares
    and chance are pooled over all query tokens of the used sentences.
    """
    sentences = list(sentences)
    rows = _rows(maps)
    if len(sentences) != len(rows.lengths):
        raise RolesError(f"{len(rows.lengths)} attention maps but {len(sentences)} sentences")
    if top_n is None:
        top_n = paper.RARE["top_n"] if vocab_size is None else default_top_n(vocab_size)
    frequent = {t for t, _ in sorted(freqs.items(), key=lambda kv: (-kv[1], kv[0]))[:top_n]}
    starts = backend.to_host(rows.starts).tolist()
    query, first, second, n_used = [], [], [], 0
    for s, (sent, t) in enumerate(zip(sentences, rows.lengths)):
        tokens = getattr(sent, "tokens", sent)
        if len(tokens) != t:
            raise RolesError(f"{_where(s, sent)}: attention map over {t} words but the sentence "
                             f"has {len(tokens)} tokens")
        if t < 2:
            continue
        order = sorted(range(t), key=lambda i: (freqs.get(tokens[i], 0), i))
        if tokens[order[0]] in frequent:
            continue
        query.extend(range(starts[s], starts[s] + t))
        first.extend([order[0]] * t)
        second.extend([order[1]] * t)
        n_used += 1
    if not query:
        raise RolesError(f"no sentence of >= 2 words has its rarest token outside the top {top_n}")
    query = xp.asarray(query)                                                    # (n_q,)
    first = xp.asarray(first)                                                    # (n_q,)
    second = xp.asarray(second)                                                  # (n_q,)
    picked = rows.argmax[:, :, query]                                            # (L, H, n_q)
    hit1 = picked == first                                                       # (L, H, n_q)
    hit2 = hit1 | (picked == second)                                             # (L, H, n_q)
    # Pooled chance: each of a sentence's T queries has 1/T (2/T), so the T queries add 1 (2).
    n_q = len(query)
    return RareShares(hit1.mean(axis=-1), hit2.mean(axis=-1), n_used / n_q, 2 * n_used / n_q,
                      n_used, top_n)


# ----------------------------------------------------------------------------------------------
# Roles (Figure 8)

def classify_heads(shares=None, acc=None, baseline=None, rare=None, positional_threshold=paper.POSITIONAL["threshold"],
                   margin=paper.SYNTACTIC_MARGIN, rare_share=paper.RARE_SHARE, confidence=None,
                   min_confidence=paper.POSITIONAL["min_confidence"]):
    """Roles of every head: a subset of {"positional", "syntactic", "rare"} (Figure 8), by the paper's definitions.

    positional (sec. 5.1): :func:`positional_heads` of ``shares`` at ``positional_threshold`` (pass the shares over
    the queries where the offset exists, :func:`positional_shares`' default); giving ``confidence`` also asks for
    confidence above ``min_confidence`` (an option: the paper observes it of its positional heads, it does not
    define them by it); syntactic (sec. 5.2): :func:`syntactic_heads` for at least one (relation, direction);
    rare (sec. 5.3): the ONE head of the FIRST layer with the highest rarest-token share, if that share is at
    least ``rare_share`` (0.5; the paper's head: 66%) -- the paper names a single first-layer rare-word head.
    Any of the measures may be None (that role is then not assigned). Returns {(l, h): set}.
    """
    given = [x for x in (shares, rare.rarest if rare is not None else None) if x is not None]
    given += list(acc.values()) if acc else []
    if not given:
        raise RolesError("classify_heads: no measure given")
    n_layers, n_heads = backend.to_host(given[0]).shape[:2]
    roles = {(l, h): set() for l in range(n_layers) for h in range(n_heads)}
    if shares is not None:
        for lh in positional_heads(shares, positional_threshold, confidence, min_confidence):
            roles[lh].add("positional")
    if acc:
        if baseline is None:
            raise RolesError("classify_heads: acc given without its baseline")
        for heads in syntactic_heads(acc, baseline, margin).values():
            for lh in heads:
                roles[lh].add("syntactic")
    if rare is not None:
        first = backend.to_host(rare.rarest)[0]                                   # (H,) first layer
        h = int(first.argmax())
        if first[h] >= rare_share - _EPS:
            roles[(0, h)].add("rare")
    return roles


# ----------------------------------------------------------------------------------------------
# BPE pieces -> words

def aggregate_attention(attn, piece_to_word, n_words, from_word="first"):
    """Attention over BPE pieces (..., P, P) -> attention over words (..., W, W).

    Attention TO a word is the sum over its pieces (columns); attention FROM a word is its first
    piece's row (``from_word="first"``) or the mean of its pieces' rows (``"mean"``, as Clark et al.
    2019, "What does BERT look at?", sec. 2 do). Both keep a row's total (first: that piece's row
    total; mean: the mean of the pieces' totals), less the weight on dropped pieces.
    ``piece_to_word[p]`` is the word of piece p; a negative entry drops the piece (EOS, BOS): its
    column is left out and its row unused. With A the (P, W) 0/1 assignment matrix and F the (W, P)
    row selector (one-hot first piece, or A^T / pieces per word): out = F @ attn @ A.
    """
    attn = xp.asarray(attn)
    if attn.ndim < 2 or attn.shape[-1] != attn.shape[-2]:
        raise RolesError(f"aggregate_attention: expected (..., P, P), got {tuple(attn.shape)}")
    n_pieces = attn.shape[-1]
    if len(piece_to_word) != n_pieces:
        raise RolesError(f"aggregate_attention: piece_to_word has {len(piece_to_word)} entries "
                         f"for {n_pieces} pieces")
    if from_word not in ("first", "mean"):
        raise RolesError(f"aggregate_attention: from_word must be 'first' or 'mean', got "
                         f"{from_word!r}")
    word = xp.asarray(piece_to_word)                                             # (P,)
    if bool((word >= n_words).any()):
        raise RolesError(f"aggregate_attention: piece_to_word has a word index >= n_words "
                         f"= {n_words}")
    assign = (word[:, None] == xp.arange(n_words)[None, :]).astype(attn.dtype)   # (P, W)
    pieces_per_word = assign.sum(axis=0)                                         # (W,)
    if bool((pieces_per_word == 0).any()):
        missing = int(xp.argmin(pieces_per_word))
        raise RolesError(f"aggregate_attention: word {missing} has no piece in piece_to_word")
    if from_word == "first":
        first = xp.argmax(assign, axis=0)                                        # (W,) first piece
        select = (xp.arange(n_pieces)[None, :] == first[:, None]).astype(attn.dtype)  # (W, P)
    else:
        select = assign.T / pieces_per_word[:, None]                             # (W, P)
    return xp.matmul(select, xp.matmul(attn, assign))                            # (..., W, W)


# ----------------------------------------------------------------------------------------------
# Plots (matplotlib imported here, so the package imports without it)

def plot_head_scores(scores, title=None, ax=None, fmt="{:.2f}", cmap=None, vmin=None,
                     vmax=None, quantity=None):
    """Heat map of any per-head score (L, H): layers as rows (0 on top), heads as columns, each
    cell annotated with its value (black or white by the cell colour's luminance). ``quantity`` (a key of
    :data:`minihead.figures.RANGES`, e.g. "relevance") draws it on that quantity's fixed range and colour map,
    the same in every chapter; ``vmin``/``vmax``/``cmap`` given explicitly win. Returns the matplotlib Axes."""
    scores = backend.to_host(scores)
    if ax is None:
        _, axes = figures.new_figure(figsize=(0.7 * scores.shape[1] + 2.0, 0.5 * scores.shape[0] + 1.3))
        ax = axes[0, 0]
    if quantity is not None:
        lo, hi = figures.colour_range(quantity)
        vmin = lo if vmin is None else vmin
        vmax = hi if vmax is None else vmax
        cmap = cmap or figures.CMAPS[quantity]
    im = ax.imshow(scores, cmap=cmap or "viridis", vmin=vmin, vmax=vmax, aspect="auto")
    for l in range(scores.shape[0]):
        for h in range(scores.shape[1]):
            ax.text(h, l, fmt.format(scores[l, h]), ha="center", va="center", fontsize=8,
                    color=figures.cell_text_colour(im, scores[l, h]))
    figures.integer_ticks(ax, n_x=scores.shape[1], n_y=scores.shape[0])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    if title:
        ax.set_title(title)
    ax.figure.colorbar(im, ax=ax)
    return ax


def plot_attention(attn, tokens, query_tokens=None, title=None, ax=None, cmap="Blues", vmin=None, vmax=None):
    """One attention map (T_q, T_k) with token labels: queries as rows, keys as columns, on the fixed
    attention range of :mod:`minihead.figures` (0..1; ``vmin``/``vmax`` override it).
    Returns the matplotlib Axes."""
    attn = backend.to_host(attn)
    query_tokens = tokens if query_tokens is None else query_tokens
    if attn.shape != (len(query_tokens), len(tokens)):
        raise RolesError(f"plot_attention: map of shape {attn.shape} for {len(query_tokens)} "
                         f"query and {len(tokens)} key tokens")
    if ax is None:
        size = 0.35 * max(len(tokens), len(query_tokens)) + 1.5
        _, axes = figures.new_figure(figsize=(size, size))
        ax = axes[0, 0]
    lo, hi = figures.ATTENTION_RANGE
    ax.imshow(attn, cmap=cmap, vmin=lo if vmin is None else vmin, vmax=hi if vmax is None else vmax)
    ax.set_xticks(range(len(tokens)))
    ax.set_xticklabels(tokens, rotation=90)
    ax.set_yticks(range(len(query_tokens)))
    ax.set_yticklabels(query_tokens)
    ax.set_xlabel("attended (key)")
    ax.set_ylabel("query")
    if title:
        ax.set_title(title)
    return ax
