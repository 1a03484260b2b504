"""The paper's criteria for head functions, in one place: each takes measured results and returns whether the
finding holds, with the numbers behind the verdict.

Voita et al. 2019, sec. 5 (thresholds from :mod:`minihead.paper`):

* positional (sec. 5.1): a head whose largest weight lands on the same relative position, -1 or +1, in at
  least 90% of cases; every positional head of the paper has confidence above 0.8;
* syntactic (sec. 5.2): a head whose argmax is the token in the relation at least 10 points more often than
  the baseline that always looks at the relation's most frequent relative position;
* a few heads carry most relevance (sec. 4): in every encoder layer the top quarter of the heads (by relevance)
  holds at least ``FEW_HEADS_MARGIN`` more of the layer's relevance than the uniform 25%;
* rare-word (sec. 5.3): a head that points to the sentence's rarest token far above chance (66% on
  OpenSubtitles); "far above" is read here as at least ``RARE_FACTOR`` times the chance rate 1 / T;
* important heads are confident, and relevance agrees with single-head ablation (sec. 4): Spearman rank
  correlation over the encoder heads above ``RANK_AGREEMENT_MIN`` (0);
* most encoder heads can be pruned at a small cost (sec. 6.2, Figure 7): some pruning run keeps at most
  ``PRUNE_KEEP_SHARE`` of the encoder heads while losing at most ``PRUNE_BLEU_TOLERANCE`` BLEU;
* specialised heads survive pruning (sec. 6.2, Figure 8), encoder self-attention is pruned first and
  decoder-encoder attention last, decoder self-attention survives in lower layers and decoder-encoder attention
  in higher ones, and a pruned model beats the same configuration trained from scratch (sec. 8, Table 2).

Every verdict is a :class:`Verdict`: ``held``, the numbers behind it, and ``numbers()``, the flat scalars that
:func:`summarize` averages over the seeds of a study (``python -m minihead reproduce --seeds 1,2,3``).
:func:`study_verdicts` gives every finding of one trained and pruned model; :data:`FINDINGS` names them in the
order of the report.
"""
import math
import statistics
from dataclasses import asdict, dataclass

from . import backend, paper
from .roles import RELATIONS, positional_heads

POSITIONAL_SHARE = paper.POSITIONAL["threshold"]          # 0.9 of the queries on one offset
POSITIONAL_CONFIDENCE = paper.POSITIONAL["min_confidence"]  # confidence > 0.8
SYNTACTIC_MARGIN = paper.SYNTACTIC_MARGIN                 # 10 points over the fixed-offset baseline
RARE_FACTOR = paper.RARE_FACTOR                           # share on the rarest token / chance
FEW_HEADS_MARGIN = paper.FEW_HEADS_MARGIN                 # top-quarter relevance share over uniform
RANK_AGREEMENT_MIN = paper.RANK_AGREEMENT_MIN             # Spearman above this: the rankings agree
PRUNE_BLEU_TOLERANCE = paper.PRUNE_BLEU_TOLERANCE         # "small cost": at most this many BLEU lost
PRUNE_KEEP_SHARE = paper.PRUNE_KEEP_SHARE                 # "most heads pruned": at most this share kept


@dataclass
class Verdict:
    """``held`` and the numbers behind it; ``to_dict`` gives JSON-able plain values, with ``numbers()`` (the
    scalars a study over seeds averages) under "numbers"."""
    held: bool

    def numbers(self):
        """Flat {name: float or None} of the verdict's key numbers (None: not measured for this model)."""
        return {}

    def to_dict(self):
        return {**asdict(self), "numbers": self.numbers()}


@dataclass
class Positional(Verdict):
    share: float          # best head's share of argmaxes on its offset (queries where the offset exists)
    share_all: float      # the same head's share over all queries (the first / last word counted as a miss)
    offset: int           # -1 or +1
    head: tuple           # (layer, head)
    confidence: float     # that head's confidence
    heads: list           # every (layer, head, offset) meeting both criteria

    def numbers(self):
        return {"share": self.share, "confidence": self.confidence, "n_heads": float(len(self.heads))}


@dataclass
class Syntactic(Verdict):
    relations_held: list  # relations with a head >= baseline + margin in some direction
    best_margins: list    # [(relation, direction, margin)] of each relation's best direction
    heads: list           # [(relation, direction, layer, head, accuracy, baseline)] meeting the criterion

    def numbers(self):
        """Each relation's best margin over the offset baseline (fraction; ``margin_<relation>``) and the number
        of relations with a syntactic head."""
        return {**{f"margin_{rel}": float(m) for rel, _, m in self.best_margins},
                "n_relations": float(len(self.relations_held))}


@dataclass
class FewHeads(Verdict):
    top_quarter: list     # per layer: share of the layer's relevance held by its top quarter of heads
    uniform: float        # that share if every head had the same relevance: ceil(H / 4) / H (0.25 for H = 4, 8)

    def numbers(self):
        return {**{f"top_quarter_L{i}": t for i, t in enumerate(self.top_quarter)},
                "top_quarter_min": min(self.top_quarter) if self.top_quarter else None}


def few_heads(top_quarter_shares, n_heads=4, margin=FEW_HEADS_MARGIN):
    """Sec. 4, "only a few heads carry most of the relevance": held when every layer's top-quarter share is
    >= uniform + ``margin``, where uniform = ceil(H / 4) / H is the share of the top ceil(H / 4) heads
    (:func:`minihead.importance.top_quarter_share`) when all H heads are equal: 0.25 for 4 or 8 heads, but
    0.5 for 2, whose "top quarter" is one head of two. ``top_quarter_shares``: one share per layer, from
    magnitude or official-rule relevance (signed z-rule shares can exceed 1 where heads cancel, so they are
    not a share of anything)."""
    tq = [float(t) for t in top_quarter_shares]
    from .importance import uniform_top_quarter_share
    uniform = uniform_top_quarter_share(n_heads)
    return FewHeads(held=bool(tq) and all(t >= uniform + margin - 1e-12 for t in tq), top_quarter=tq,
                    uniform=uniform)


@dataclass
class RareWord(Verdict):
    share: object         # best head's share of queries whose argmax is the rarest token (None: no sentence)
    chance: object        # chance rate (mean 1 / T) over the same queries
    head: object          # (layer, head) of the best head, or None

    def numbers(self):
        ratio = None if self.share is None or not self.chance else self.share / self.chance
        return {"share": self.share, "chance": self.chance, "share_over_chance": ratio}


def positional(report, share=POSITIONAL_SHARE, confidence=POSITIONAL_CONFIDENCE):
    """Sec. 5.1 on a :class:`minihead.analysis.RolesReport`: a head with >= ``share`` of its argmaxes on -1
    or on +1, counted over the queries where that offset exists (``report.shares_possible``, so the verdict
    does not depend on sentence length), and confidence > ``confidence``."""
    sp = backend.to_host(report.shares_possible)                                # (L, H, 2)
    sa = backend.to_host(report.shares)                                         # (L, H, 2)
    conf = backend.to_host(report.confidence)                                   # (L, H)
    lh, k = divmod(int(sp.argmax()), 2)                                          # flat index of (L, H, 2)
    l, h = divmod(lh, sp.shape[1])
    heads = [(li, hi, off) for (li, hi), off in sorted(positional_heads(sp, share, conf, confidence).items())]
    return Positional(held=bool(heads), share=float(sp[l, h, k]), share_all=float(sa[l, h, k]),
                      offset=(-1, 1)[k], head=(l, h), confidence=float(conf[l, h]), heads=heads)


def syntactic(report, margin=SYNTACTIC_MARGIN, relations=RELATIONS):
    """Sec. 5.2: for each relation, a head whose accuracy (``report.acc``) is >= the fixed-offset baseline
    (``report.baseline``) + ``margin`` in either direction."""
    heads, best = [], {}
    for (rel, d), acc in report.acc.items():
        if rel not in relations:
            continue
        acc = backend.to_host(acc)                                              # (L, H)
        base = float(report.baseline[(rel, d)])
        m = float(acc.max()) - base
        if rel not in best or m > best[rel][2]:
            best[rel] = (rel, d, m)
        for l in range(acc.shape[0]):
            for h in range(acc.shape[1]):
                if acc[l, h] >= base + margin - 1e-12:
                    heads.append((rel, d, l, h, float(acc[l, h]), base))
    held = [r for r in relations if any(x[0] == r for x in heads)]
    return Syntactic(held=bool(held), relations_held=held, best_margins=[best[r] for r in relations if r in best],
                     heads=heads)


def rare_word(report, factor=RARE_FACTOR):
    """Sec. 5.3: the best head's share of queries pointing at the sentence's rarest token, against chance;
    held when it is >= ``factor`` x chance."""
    if report.rare is None:
        return RareWord(held=False, share=None, chance=None, head=None)
    r = backend.to_host(report.rare.rarest)                                     # (L, H)
    l, h = divmod(int(r.argmax()), r.shape[1])
    share, chance = float(r[l, h]), float(report.rare.chance_rarest)
    return RareWord(held=share >= factor * chance, share=share, chance=chance, head=(l, h))



# --------------------------------------------------------------------------- importance (sec. 4)
@dataclass
class RankAgreement(Verdict):
    rho: float            # Spearman over the encoder heads, the paper's z-rule relevance
    rho_official: object  # the same with the official code's LRP variant (None: not measured)

    def numbers(self):
        return {"rho": self.rho, "rho_official": self.rho_official}


def relevance_agrees_with_ablation(rho, rho_official=None, minimum=RANK_AGREEMENT_MIN):
    """Sec. 4: the heads LRP ranks important are the ones whose removal hurts ("important heads matter"):
    held when the Spearman correlation of head relevance with the BLEU drop of single-head ablation, over the
    encoder heads, is > ``minimum`` (0). ``rho_official``: the official variant's, reported beside it."""
    return RankAgreement(held=bool(rho > minimum), rho=float(rho),
                         rho_official=None if rho_official is None else float(rho_official))


def important_heads_confident(rho, rho_official=None, minimum=RANK_AGREEMENT_MIN):
    """Sec. 4, "those heads tend to be confident": held when the Spearman correlation of head relevance with
    head confidence (mean largest attention weight), over the encoder heads, is > ``minimum`` (0)."""
    return RankAgreement(held=bool(rho > minimum), rho=float(rho),
                         rho_official=None if rho_official is None else float(rho_official))


# --------------------------------------------------------------------------- pruning (sec. 6, 8)
@dataclass
class Prunable(Verdict):
    kept: int             # fewest encoder heads kept by a run within the tolerance (n_heads: no such run)
    n_heads: int          # encoder heads in all
    bleu_full: float      # test BLEU with every head
    bleu_kept: float      # test BLEU of that run (bleu_full when no run qualifies)

    def numbers(self):
        return {"kept": float(self.kept), "kept_share": self.kept / self.n_heads, "bleu_full": self.bleu_full,
                "bleu_change": self.bleu_kept - self.bleu_full}


def most_encoder_heads_prunable(runs, full_bleu, n_heads, tolerance=PRUNE_BLEU_TOLERANCE, keep_share=PRUNE_KEEP_SHARE):
    """Sec. 6.2, Figure 7: "most encoder heads can be pruned at a small cost" (WMT: 10 of 48 kept for -0.15 BLEU).
    ``runs``: encoder pruning runs (dicts with ``n_retained["enc"]`` and test ``bleu``); the knee is the fewest
    heads kept by a run whose BLEU is >= ``full_bleu - tolerance`` (1); held when that is <= ``keep_share`` (half)
    of the ``n_heads`` encoder heads."""
    ok = [(r["n_retained"]["enc"], -r["bleu"]) for r in runs if r["bleu"] >= full_bleu - tolerance - 1e-12]
    kept, neg_bleu = min(ok, default=(n_heads, -full_bleu))
    return Prunable(held=bool(kept <= keep_share * n_heads), kept=int(kept), n_heads=int(n_heads),
                    bleu_full=float(full_bleu), bleu_kept=float(-neg_bleu))


@dataclass
class RunTally(Verdict):
    """A finding judged run by run: ``held`` when every judged run shows it, ``partly`` when some do."""
    runs_held: int
    runs: int
    detail: list          # one entry per judged run (see each criterion)
    partly: bool = False

    def numbers(self):
        return {"runs_held": float(self.runs_held), "runs": float(self.runs)}


def _tally(flags, detail, partly=None):
    n, k = len(flags), sum(bool(f) for f in flags)
    held = bool(n) and k == n
    return dict(held=held, runs_held=k, runs=n, detail=detail,
                partly=(not held and k > 0) if partly is None else (not held and bool(partly)))


@dataclass
class SpecialisedSurvive(RunTally):
    def numbers(self):
        """Also the mean excess of the role-carrying share among the survivors over the share among all heads."""
        excess = [sk - sa for _, _, sk, sa in self.detail]
        return {**super().numbers(), "excess_share": sum(excess) / len(excess) if excess else None}


def specialised_heads_survive(runs, roles, n_heads):
    """Sec. 6.2, Figure 8: "the heads that survive longest are the positional, syntactic and rare-word ones".
    For each encoder run that kept at most half of the ``n_heads`` heads and at least one
    (:func:`minihead.prune.survivor_role_shares`), the share of role-carrying heads (``roles``, (l, h) -> set)
    among the survivors must exceed their share among all heads. Held when it does in every such run (and there
    is one), partly in some. ``detail``: [(lambda, kept, share among survivors, share among all)]."""
    from .prune import survivor_role_shares
    shares = [tuple(float(x) for x in s) for s in survivor_role_shares(runs, roles, n_heads)]
    return SpecialisedSurvive(**_tally([sk > sa for _, _, sk, sa in shares], shares))


@dataclass
class TypeOrder(RunTally):
    def numbers(self):
        """Also each attention type's share of heads kept, averaged over the runs."""
        out = super().numbers()
        for k in ("enc", "dec_self", "dec_enc"):
            vals = [d["kept_share"][k] for d in self.detail if k in d["kept_share"]]
            out[f"kept_share_{k}"] = sum(vals) / len(vals) if vals else None
        return out


def encoder_pruned_first(runs, cfg):
    """Sec. 8: "encoder self-attention heads go first, decoder-encoder heads last". One all-attention run holds
    when encoder self-attention keeps the smallest share of its heads and decoder-encoder the largest
    (:func:`minihead.prune.type_order_holds`) AND encoder self-attention is the first type to lose half of its
    heads along the run (:func:`minihead.prune.encoder_closes_first`). Held when every run holds (and there is
    one); partly when the final order holds in some run. ``detail``: per run {lam, kept, kept_share, order,
    first}."""
    from .prune import encoder_closes_first, retained_shares, type_order_holds
    detail = [{"lam": float(r["lam"]), "kept": {k: int(x) for k, x in r["n_retained"].items()},
               "kept_share": retained_shares(r, cfg), "order": bool(type_order_holds(r, cfg)),
               "first": bool(encoder_closes_first(r, cfg)[0])} for r in runs]
    return TypeOrder(**_tally([d["order"] and d["first"] for d in detail], detail,
                              partly=any(d["order"] for d in detail)))


@dataclass
class DecoderLayers(RunTally):
    def numbers(self):
        """Also the mean layer of each decoder type's survivors (0 = lowest), averaged over the runs."""
        out = super().numbers()
        for k in ("dec_self", "dec_enc"):
            vals = [ml for kind, ml, _ in self.detail if kind == k]
            out[f"mean_layer_{k}"] = sum(vals) / len(vals) if vals else None
        return out


def decoder_layer_order(runs, cfg):
    """Sec. 8: "decoder self-attention survives mostly in lower layers, decoder-encoder attention in higher
    layers". For each all-attention run and each of the two decoder types that lost heads in it, the mean layer
    of its survivors must be below the middle layer (dec_self) or above it (dec_enc)
    (:func:`minihead.prune.survivor_layers`). Held when every such check holds (and there is one), partly when
    some do. ``detail``: [(kind, mean layer, holds)] over the runs."""
    from .prune import survivor_layers
    detail = [(k, float(ml), bool(h)) for r in runs for k, ml, h in survivor_layers(r, cfg)]
    return DecoderLayers(**_tally([h for *_, h in detail], detail))


@dataclass
class PrunedVsScratch(RunTally):
    def numbers(self):
        """Also pruned minus from-scratch BLEU, averaged over the configurations."""
        gaps = [p - s for p, s in self.detail]
        return {**super().numbers(), "bleu_gap": sum(gaps) / len(gaps) if gaps else None}


def pruned_beats_scratch(pruned_bleu, scratch_bleu):
    """Sec. 8, Table 2: "pruned models beat the same configuration trained from scratch" (7 of 7 configurations
    in the paper). ``pruned_bleu`` and ``scratch_bleu``: test BLEU of each configuration, in the same order; a
    configuration holds when pruned >= from scratch. Held when all do (and there is one), partly when some do.
    ``detail``: [(pruned, scratch)]."""
    if len(pruned_bleu) != len(scratch_bleu):
        raise ValueError(f"pruned_beats_scratch: {len(pruned_bleu)} pruned BLEU against {len(scratch_bleu)} "
                         "from scratch; give one of each per configuration")
    detail = [(float(p), float(s)) for p, s in zip(pruned_bleu, scratch_bleu)]
    return PrunedVsScratch(**_tally([p >= s for p, s in detail], detail))


# --------------------------------------------------------------------------- every finding of one model
# name -> what the paper claims; the order of the report's rows
FINDINGS = {
    "few_heads": "a few heads carry most relevance",
    "relevance_ablation": "relevance agrees with single-head ablation",
    "confident": "important heads are confident",
    "positional": "positional heads",
    "syntactic": "syntactic heads",
    "rare_word": "a rare-word head",
    "prunable": "most encoder heads prunable at small cost",
    "specialised_survive": "specialised heads survive pruning longest",
    "encoder_first": "encoder self-attention pruned first, decoder-encoder last",
    "decoder_layers": "decoder self-attention survives in lower layers, decoder-encoder in higher",
    "pruned_vs_scratch": "pruned beats the same configuration from scratch",
}


def importance_verdicts(summary, n_heads=4):
    """The three relevance findings of sec. 4 (few heads, relevance ~ ablation, important heads confident) from
    :func:`minihead.reproduce.importance_summary`, judged on the paper's z-rule with magnitude shares
    |r_h| / sum_h' |r_h'| per prediction: the signed shares of a layer nearly cancel on these models, so they
    neither form a share nor rank heads (chapter 2, sec. 3.3). The official variant's rho rides along in the
    numbers; the report prints every rule's. ``n_heads``: heads per encoder layer (sets the uniform share)."""
    return {"few_heads": few_heads(summary["top_quarter_share_abs"], n_heads),
            "relevance_ablation": relevance_agrees_with_ablation(summary["rho_relevance_ablation_abs"],
                                                                 summary.get("rho_relevance_ablation_official")),
            "confident": important_heads_confident(summary["rho_relevance_confidence_abs"],
                                                   summary.get("rho_relevance_confidence_official"))}


def study_verdicts(summary, report, base, enc, allk, scratch, cfg):
    """Every finding of :data:`FINDINGS` for one model, as {name: Verdict}, from the stages of
    ``python -m minihead reproduce``: ``summary`` (:func:`minihead.reproduce.importance_summary`), ``report``
    (head roles, :func:`minihead.analysis.head_roles`), ``base`` (test BLEU with every head), ``enc`` and
    ``allk`` (the encoder and all-attention pruning runs), ``scratch`` (from-scratch trainings of the last
    ``len(scratch)`` all-attention configurations) and the model's ``cfg``."""
    n_enc = cfg.n_enc_layers * cfg.n_heads
    paired = allk[-len(scratch):] if scratch else []
    return {
        **importance_verdicts(summary, cfg.n_heads),
        "positional": positional(report),
        "syntactic": syntactic(report),
        "rare_word": rare_word(report),
        "prunable": most_encoder_heads_prunable(enc, base["bleu"], n_enc),
        "specialised_survive": specialised_heads_survive(enc, report.roles, n_enc),
        "encoder_first": encoder_pruned_first(allk, cfg),
        "decoder_layers": decoder_layer_order(allk, cfg),
        "pruned_vs_scratch": pruned_beats_scratch([r["bleu"] for r in paired], [sc["bleu"] for sc in scratch]),
    }


# --------------------------------------------------------------------------- over seeds
def _mean_sd(values):
    """(mean, sample standard deviation, values) over the values that were measured (not None, not NaN: a
    Spearman rho of a constant score); sd 0 for one such value, mean and sd None for none."""
    xs = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return (None, None, list(values))
    return (statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0, list(values))


def summarize(per_seed):
    """The study over seeds: ``per_seed`` is a list (one entry per seed) of {finding name: Verdict or its
    ``to_dict()``}. Returns, per finding in the order first seen, {"held_in": k, "of": n, "status": "all" |
    "some" | "none", "partly_in": seeds where it held in part, "numbers": {name: (mean, sd, values)}}, where
    ``values`` lists each seed's number in order (None where a seed did not measure it; mean and sd are over
    the others, NaN values left out too, sd the sample standard deviation, 0 for one seed). Chapters assert a finding whose status is
    "all", show one that is "some", and state one that is "none" as not reproduced."""
    if not per_seed:
        raise ValueError("summarize: no seeds given")
    dicts = [{name: v.to_dict() if isinstance(v, Verdict) else v for name, v in seed.items()} for seed in per_seed]
    names = list(dict.fromkeys(name for d in dicts for name in d))
    out = {}
    for name in names:
        verdicts = [d.get(name) for d in dicts]
        if any(v is None for v in verdicts):
            raise ValueError(f"summarize: finding {name!r} is missing in seed {verdicts.index(None) + 1} of "
                             f"{len(verdicts)}; every seed must judge the same findings")
        k, n = sum(bool(v["held"]) for v in verdicts), len(verdicts)
        keys = list(dict.fromkeys(key for v in verdicts for key in v.get("numbers", {})))
        out[name] = {"held_in": k, "of": n, "status": "all" if k == n else "none" if k == 0 else "some",
                     "partly_in": sum(bool(v.get("partly")) for v in verdicts),
                     "numbers": {key: _mean_sd([v.get("numbers", {}).get(key) for v in verdicts]) for key in keys}}
    return out


# --------------------------------------------------------------------------- the chapters' closing claims
def check_claims(summary, verdicts, names=None, log=print):
    """The closing check of a chapter (issue 14): each finding in ``names`` (default: every finding of
    ``verdicts``) judged on the chapter's own model (``verdicts``: {name: Verdict}) against the study over seeds
    (``summary``: :func:`summarize` of ``python -m minihead reproduce --seeds``):

    * status "all" (held in every seed): a claim; asserted to hold for this model as well;
    * status "some": shown with each seed's numbers and this model's verdict, asserted neither way;
    * status "none": stated as not reproduced at this scale, with the numbers (asserted neither way).

    Nothing here depends on one model's numbers except through a finding that held in every seed. Returns
    {name: status}; raises AssertionError naming the finding, the study's count and this model's numbers when
    a claim fails."""
    names = list(verdicts) if names is None else list(names)
    out = {}
    for name in names:
        if name not in summary:
            raise KeyError(f"check_claims: the study has no finding {name!r} (it has {', '.join(summary)})")
        f, v = summary[name], verdicts[name]
        mine = v.numbers() if isinstance(v, Verdict) else v.get("numbers", {})
        held = bool(v.held if isinstance(v, Verdict) else v["held"])
        nums = "; ".join(f"{k} {fmt(m)} +- {fmt(sd)} [{', '.join(fmt(x) for x in vals)}]"
                         for k, (m, sd, vals) in f["numbers"].items() if m is not None)
        here = ", ".join(f"{k} {fmt(x)}" for k, x in mine.items())
        what = FINDINGS.get(name, name)
        if f["status"] == "all":
            log(f"CLAIM  {what}: held in all {f['of']} seeds of the study; this model: "
                f"{'holds' if held else 'DOES NOT HOLD'} ({here})")
            assert held, (f"{what} ({name}) held in all {f['of']} seeds of the study but not in this model: {here}; "
                          f"study: {nums}")
        elif f["status"] == "some":
            log(f"SHOWN  {what}: held in {f['held_in']} of {f['of']} seeds (not a claim); this model: "
                f"{'holds' if held else 'does not hold'} ({here}); seeds: {nums}")
        else:
            log(f"NOT REPRODUCED at this scale  {what}: held in 0 of {f['of']} seeds; seeds: {nums}; "
                f"this model: {'holds' if held else 'does not hold'} ({here})")
        out[name] = f["status"]
    return out


def fmt(x):
    """A number as the study's tables print it: two decimals for a float, as is otherwise, "-" for None."""
    return "-" if x is None else f"{x:.2f}" if isinstance(x, float) else str(x)
