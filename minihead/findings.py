"""The paper's findings as criteria, in one place: each takes measured results and returns a :class:`Verdict`
with a status, the numbers behind it, the paper's number and the criterion it applied.

Every criterion follows Voita et al. 2019 as the paper defines it (the section is in each docstring); its
thresholds are read from :mod:`minihead.paper`. A verdict has one of these statuses:

* ``holds`` / ``does not hold``: judged, by the criterion;
* ``untestable``: the criterion cannot tell at this size, with the reason (e.g. "a few heads of the layer" with
  two heads a layer; a rare-word head when no sentence has a rare enough rarest token);
* ``not measured``: the study did not record what the criterion needs (the reason says what).

Two kinds of finding:

* **per model** (:data:`PER_SEED`): judged on each seed's model; a study over seeds counts the seeds it holds
  in (:func:`summarize`: "holds" in every testable seed, "varies", "does not hold" in none);
* **pooled** (:data:`POOLED`): a correlation or a difference claimed over the encoder heads; one seed's twelve
  heads cannot decide it, so each seed contributes its measurement and :func:`summarize` judges one test pooled
  over the seeds (Fisher z for rank correlations, a permutation test stratified by seed for role heads, a paired
  t-interval for pruned against from scratch), claimed only at p < ``ALPHA``.

:func:`study_verdicts` gives every finding of one trained and pruned model; :data:`FINDINGS` names them in the
order of the report, :func:`check_claims` is a chapter's closing check, :func:`findings_table` the table a chapter
and the README end with.
"""
import math
import random
import statistics
from dataclasses import asdict, dataclass, field


from . import backend, paper
from .backend import xp
from .importance import rank_agreement as spearman
from .importance import uniform_top_quarter_share
from .model import GATE_KINDS
from .roles import RELATIONS, positional_heads

POSITIONAL_SHARE = paper.POSITIONAL["threshold"]          # 0.9 of the argmaxes on one offset
SYNTACTIC_MARGIN = paper.SYNTACTIC_MARGIN                 # 10 points over the fixed-offset baseline
RARE_SHARE = paper.RARE_SHARE                             # the rare-word head's share on the rarest token
RARE_TOP_N = paper.RARE["top_n"]                          # sentences whose rarest token is outside the top 500
FEW_HEADS_MARGIN = paper.FEW_HEADS_MARGIN                 # top-quarter relevance share over uniform
FEW_HEADS_MIN = paper.FEW_HEADS_MIN_HEADS                 # "a few of the layer's heads" needs >= 4 heads
ALPHA = paper.ALPHA                                       # a pooled claim needs p below this
PRUNE_BLEU_TOLERANCE = paper.PRUNE_BLEU_TOLERANCE         # "small cost": at most this many BLEU lost
PRUNE_KEEP_SHARE = paper.PRUNE_KEEP_SHARE                 # "most heads pruned": at most this share kept
STATUSES = ("holds", "does not hold", "untestable", "not measured")
CRITERIA_VERSION = 2     # in every study's provenance: a study judged under other criteria is stale


@dataclass(kw_only=True)
class Verdict:
    """``status`` (one of :data:`STATUSES`), ``reason`` (why untestable or not measured; empty otherwise) and the
    numbers behind the verdict; ``numbers()`` gives the flat scalars a study over seeds averages, ``text()`` one
    line of them for tables, ``to_dict`` JSON-able plain values."""
    status: str
    reason: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"Verdict status {self.status!r}; one of {', '.join(STATUSES)}")

    @property
    def held(self):
        return self.status == "holds"

    def numbers(self):
        """Flat {name: float or None} of the verdict's key numbers (None: not measured for this model)."""
        return {}

    def text(self):
        """This model's numbers in words, for the report's table."""
        return "; ".join(f"{k} {fmt(v)}" for k, v in self.numbers().items()) or "-"

    def to_dict(self):
        return {**asdict(self), "held": self.held, "numbers": self.numbers()}


def _judged(ok):
    return "holds" if ok else "does not hold"


def not_measured(what):
    """A :class:`Verdict` for a finding whose inputs a study did not record (``what``: which)."""
    return Verdict(status="not measured", reason=what)


# --------------------------------------------------------------------------- head roles (sec. 5)
@dataclass(kw_only=True)
class Positional(Verdict):
    share: float          # best head's share of argmaxes on its offset (queries where the offset exists)
    share_all: float      # the same head's share over all queries (the first / last word counted as a miss)
    offset: int           # -1 or +1
    head: tuple           # (layer, head)
    confidence: float     # that head's confidence (reported, not judged: sec. 5.1 observes it)
    heads: list           # every (layer, head, offset) with share >= POSITIONAL_SHARE

    def numbers(self):
        return {"share": self.share, "confidence": self.confidence, "n_heads": float(len(self.heads))}

    def text(self):
        return (f"{len(self.heads)} head(s); best L{self.head[0]}H{self.head[1]} on {self.offset:+d}: "
                f"{self.share:.2f} of its argmaxes (confidence {self.confidence:.2f})")


def positional(report, share=POSITIONAL_SHARE):
    """Sec. 5.1: "a head is positional if at least 90% of the time its maximum attention weight is assigned to a
    specific relative position (in practice either -1 or +1)". Judged on ``report.shares_possible`` (the queries
    where that offset exists, so the verdict does not depend on sentence length). Confidence is reported beside:
    the paper observes that these heads are confident (> 0.8), it does not define them by it."""
    sp = backend.to_host(report.shares_possible)                                # (L, H, 2)
    sa = backend.to_host(report.shares)                                         # (L, H, 2)
    conf = backend.to_host(report.confidence)                                   # (L, H)
    lh, k = divmod(int(sp.argmax()), 2)                                          # flat index of (L, H, 2)
    l, h = divmod(lh, sp.shape[1])
    heads = [(li, hi, off) for (li, hi), off in sorted(positional_heads(sp, share).items())]
    return Positional(status=_judged(bool(heads)), share=float(sp[l, h, k]), share_all=float(sa[l, h, k]),
                      offset=(-1, 1)[k], head=(l, h), confidence=float(conf[l, h]), heads=heads)


@dataclass(kw_only=True)
class Syntactic(Verdict):
    relations_held: list  # relations with a head >= baseline + margin in some direction
    best_margins: list    # [(relation, direction, margin)] of each relation's best direction
    heads: list           # [(relation, direction, layer, head, accuracy, baseline)] meeting the criterion

    def numbers(self):
        """Each relation's best margin over the offset baseline (fraction; ``margin_<relation>``) and the number
        of relations with a syntactic head."""
        return {**{f"margin_{rel}": float(m) for rel, _, m in self.best_margins},
                "n_relations": float(len(self.relations_held))}

    def text(self):
        return (f"relations with a head: {', '.join(self.relations_held) or 'none'}; best margin, points: "
                + ", ".join(f"{r} {m * 100:+.0f}" for r, _, m in self.best_margins))


def syntactic(report, margin=SYNTACTIC_MARGIN, relations=RELATIONS):
    """Sec. 5.2: for each of nsubj, obj, amod, advmod, in either direction (head->dependent, dependent->head), a
    head whose argmax is the related token (``report.acc``) at least ``margin`` (10 points) more often than the
    baseline that always looks at the relation's most frequent relative position (``report.baseline``)."""
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
    return Syntactic(status=_judged(bool(held)), relations_held=held,
                     best_margins=[best[r] for r in relations if r in best], heads=heads)


@dataclass(kw_only=True)
class RareWord(Verdict):
    share: object         # the best first-layer head's share of queries whose argmax is the rarest token
    chance: object        # chance rate (mean 1 / T) over the same queries
    head: object          # (0, head) of that head, or None
    n_sentences: int = 0  # sentences whose rarest token is outside the top_n most frequent
    top_n: int = RARE_TOP_N
    relevance_rank: object = None   # that head's rank by LRP relevance within the first layer (1 = most relevant)

    def numbers(self):
        ratio = None if self.share is None or not self.chance else self.share / self.chance
        return {"share": self.share, "share_over_chance": ratio, "n_sentences": float(self.n_sentences)}

    def text(self):
        if self.share is None:
            return f"no sentence has its rarest token outside the top {self.top_n}"
        rank = "" if self.relevance_rank is None else f", relevance rank {self.relevance_rank} in its layer"
        return (f"L0H{self.head[1]}: {self.share:.0%} of the queries on the rarest token ({self.share / self.chance:.1f}x "
                f"chance) over {self.n_sentences} sentences{rank}")


def rare_word(report, share=RARE_SHARE, relevance=None):
    """Sec. 5.3: "the head in the first layer ... pointing to the least frequent tokens in a sentence": over the
    sentences whose rarest token is outside the ``report.rare.top_n`` (the paper: 500) most frequent, the share
    of queries whose argmax is the sentence's rarest token, for the best head of the FIRST layer; held at >=
    ``share`` (50%; the paper's head reaches 66% on OpenSubtitles). ``relevance``: (L, H) head relevance, to report
    that head's rank within its layer. Untestable when no sentence qualifies."""
    r = report.rare
    if r is None:
        return RareWord(status="untestable", share=None, chance=None, head=None,
                        reason=f"no sentence has its rarest token outside the top {RARE_TOP_N} words")
    first = backend.to_host(r.rarest)[0]                                         # (H,) first layer
    h = int(first.argmax())
    rank = None
    if relevance is not None:
        rel0 = [float(x) for x in backend.to_host(relevance)[0]]
        rank = 1 + sum(x > rel0[h] for x in rel0)
    return RareWord(status=_judged(float(first[h]) >= share - 1e-12), share=float(first[h]),
                    chance=float(r.chance_rarest), head=(0, h), n_sentences=int(r.n_sentences), top_n=int(r.top_n),
                    relevance_rank=rank)


def role_score(report):
    """(L, H) how far each head is past its nearest role line, in share points: the largest of its positional
    share minus 0.9, its best syntactic accuracy minus (baseline + 0.10), and, in the first layer, its
    rarest-token share minus 0.5. A head has a role (:func:`minihead.roles.classify_heads`) where it is >= 0; the
    continuous score ranks the heads for the rank tests of sec. 6.2."""
    sp = backend.to_host(report.shares_possible).max(-1) - POSITIONAL_SHARE      # (L, H)
    score = sp.copy()
    for k, acc in report.acc.items():
        score = _maximum(score, backend.to_host(acc) - float(report.baseline[k]) - SYNTACTIC_MARGIN)
    if report.rare is not None:
        rare = backend.to_host(report.rare.rarest) - RARE_SHARE                  # (L, H)
        score[0] = _maximum(score[0], rare[0])
    return score


def _maximum(a, b):
    return (a > b) * a + (a <= b) * b


# --------------------------------------------------------------------------- importance (sec. 4)
@dataclass(kw_only=True)
class FewHeads(Verdict):
    top_quarter: list     # per layer: share of the layer's relevance held by its top quarter of heads
    uniform: float        # that share if every head had the same relevance: ceil(H / 4) / H
    n_heads: int = 0

    def numbers(self):
        return {**{f"top_quarter_L{i}": t for i, t in enumerate(self.top_quarter)},
                "top_quarter_min": min(self.top_quarter) if self.top_quarter else None}

    def text(self):
        return (f"top quarter's share per layer {', '.join(f'{t:.2f}' for t in self.top_quarter)} "
                f"(uniform {self.uniform:.2f})")


def few_heads(top_quarter_shares, n_heads=4, margin=FEW_HEADS_MARGIN):
    """Sec. 4, Figure 1: "in each layer ... only a few heads" carry most of the relevance. Held when every layer's
    top quarter of heads holds >= uniform + ``margin`` of the layer's relevance (uniform = ceil(H / 4) / H, the
    share if all H heads were equal). Untestable with fewer than ``FEW_HEADS_MIN`` (4) heads a layer: the top
    quarter is then one head of two or three, and "one of a few does the work" cannot be told from "all are
    needed". ``top_quarter_shares``: one share per layer, from magnitude or official-rule relevance."""
    tq = [float(t) for t in top_quarter_shares]
    uniform = uniform_top_quarter_share(n_heads)
    if n_heads < FEW_HEADS_MIN:
        return FewHeads(status="untestable", top_quarter=tq, uniform=uniform, n_heads=n_heads,
                        reason=f"{n_heads} heads a layer: its top quarter is one head of {n_heads} (the paper has 8)")
    return FewHeads(status=_judged(bool(tq) and all(t >= uniform + margin - 1e-12 for t in tq)), top_quarter=tq,
                    uniform=uniform, n_heads=n_heads)


@dataclass(kw_only=True)
class RankAgreement(Verdict):
    """One seed's Spearman rho over the encoder heads; the claim is judged pooled over seeds (:func:`pool_rho`)."""
    rho: object           # Spearman over the n heads (None or NaN: not measured / a constant score)
    n: int                # heads
    rho_official: object = None   # the same with the official code's LRP variant, reported beside

    def numbers(self):
        return {"rho": self.rho, "rho_official": self.rho_official, "n": float(self.n)}

    def text(self):
        off = "" if self.rho_official is None else f" (official variant {self.rho_official:.2f})"
        return f"Spearman rho {fmt(self.rho)} over {self.n} heads{off}"


def rank_agreement(rho, n, rho_official=None):
    """One seed's contribution to a pooled rank correlation (sec. 4): ``status`` here says only whether rho is
    positive; the finding is :func:`pool_rho` over the seeds."""
    ok = rho is not None and not math.isnan(rho)
    return RankAgreement(status=_judged(ok and rho > 0) if ok else "untestable", rho=None if not ok else float(rho),
                         n=int(n), rho_official=None if rho_official is None else float(rho_official),
                         reason="" if ok else "a constant score has no ranks")


def relevance_agrees_with_ablation(rho, n, rho_official=None):
    """Sec. 4 ("important heads matter"): the heads LRP ranks important are the ones whose removal hurts: the
    Spearman correlation of head relevance with the BLEU drop of single-head ablation (Michel et al.'s measure)
    over the encoder heads, positive pooled over seeds (:func:`pool_rho`)."""
    return rank_agreement(rho, n, rho_official)


def important_heads_confident(rho, n, rho_official=None):
    """Sec. 4, "those heads tend to be confident": Spearman correlation of head relevance with head confidence
    (mean largest attention weight) over the encoder heads, positive pooled over seeds (:func:`pool_rho`)."""
    return rank_agreement(rho, n, rho_official)


@dataclass(kw_only=True)
class RoleDifference(Verdict):
    """One seed's per-head values and role flags; the claim is judged pooled (:func:`pool_role_difference`)."""
    values: list          # one value per encoder head (relevance share or ablation BLEU drop)
    roles: list           # True where the head has a role (on the judged trees)

    def numbers(self):
        a = [v for v, r in zip(self.values, self.roles) if r]
        b = [v for v, r in zip(self.values, self.roles) if not r]
        diff = statistics.fmean(a) - statistics.fmean(b) if a and b else None
        return {"role_mean": statistics.fmean(a) if a else None, "other_mean": statistics.fmean(b) if b else None,
                "difference": diff, "n_role": float(len(a))}

    def text(self):
        m = self.numbers()
        return (f"{int(m['n_role'])} of {len(self.roles)} heads with a role: mean {fmt(m['role_mean'])} vs "
                f"{fmt(m['other_mean'])} for the others")


def role_heads_differ(values, roles_of_heads):
    """Sec. 4 with sec. 5 (the paper's headline: "the most important heads are the specialised ones"): one seed's
    ``values`` (L, H) and ``roles_of_heads`` {(l, h): set}; judged pooled (:func:`pool_role_difference`): role heads
    carry more than the others. Untestable in a seed where every head, or no head, has a role."""
    v = backend.to_host(values)
    flat = [float(v[l, h]) for l in range(v.shape[0]) for h in range(v.shape[1])]
    flags = [bool(roles_of_heads.get((l, h))) for l in range(v.shape[0]) for h in range(v.shape[1])]
    mixed = any(flags) and not all(flags)
    d = RoleDifference(status="untestable", values=flat, roles=flags,
                       reason="" if mixed else "every head or no head has a role")
    if mixed:
        d.status = _judged(d.numbers()["difference"] > 0)
    return d


# --------------------------------------------------------------------------- pruning (sec. 6, 8)
@dataclass(kw_only=True)
class Prunable(Verdict):
    kept: int             # fewest encoder heads kept by a run within the tolerance of its reference
    n_heads: int          # encoder heads in all
    bleu_ref: object      # the step-matched lambda = 0 reference of that run
    bleu_kept: object     # test BLEU of that run
    runs: list = field(default_factory=list)   # [(lambda, kept, steps, BLEU, reference BLEU)] of every run

    def numbers(self):
        if self.status == "not measured":   # no reference: no knee was looked for, so no count to average
            return {"kept": None, "kept_share": None, "bleu_change": None}
        change = None if self.bleu_ref is None else self.bleu_kept - self.bleu_ref
        return {"kept": float(self.kept), "kept_share": self.kept / self.n_heads, "bleu_change": change}

    def text(self):
        if self.bleu_ref is None:
            return f"no run within {PRUNE_BLEU_TOLERANCE:g} BLEU of its reference keeps fewer than {self.n_heads} heads"
        return (f"{self.kept} of {self.n_heads} heads kept at {self.bleu_kept - self.bleu_ref:+.2f} BLEU against the "
                f"lambda = 0 run at the same step")


def most_encoder_heads_prunable(runs, n_heads, tolerance=PRUNE_BLEU_TOLERANCE, keep_share=PRUNE_KEEP_SHARE):
    """Sec. 6.2, Figure 7: "most encoder heads can be pruned at a small cost" (WMT: 10 of 48 kept for -0.15 BLEU).
    Every pruning run also trains on, so each run is compared with a reference trained for the SAME steps: the
    lambda = 0 run of the same settings at that run's step (``ref_bleu`` of each run, :func:`minihead.prune.
    reference_bleu`). The knee is the fewest heads kept by a run with BLEU >= its reference - ``tolerance``
    (1 BLEU); "most" heads pruned means at most ``keep_share`` (a third) of the ``n_heads`` kept. ``runs``: dicts
    with lam, ``n_retained["enc"]``, bleu, steps_used, ref_bleu. Not measured when a run lacks its reference."""
    if any(r.get("ref_bleu") is None for r in runs):
        return Prunable(status="not measured", kept=n_heads, n_heads=n_heads, bleu_ref=None, bleu_kept=None,
                        reason="no step-matched lambda = 0 reference (a study made before it was recorded)")
    detail = [(float(r["lam"]), int(r["n_retained"]["enc"]), int(r.get("steps_used", 0)), float(r["bleu"]),
               float(r["ref_bleu"])) for r in runs]
    ok = [(kept, ref - bleu, bleu, ref) for _, kept, _, bleu, ref in detail if bleu >= ref - tolerance - 1e-12]
    if not ok:
        return Prunable(status="does not hold", kept=n_heads, n_heads=n_heads, bleu_ref=None, bleu_kept=None,
                        runs=detail)
    kept, _, bleu, ref = min(ok)
    return Prunable(status=_judged(kept <= keep_share * n_heads + 1e-12), kept=int(kept), n_heads=int(n_heads),
                    bleu_ref=ref, bleu_kept=bleu, runs=detail)


def closing_lambda(runs, n_layers, n_heads):
    """(L, H) the smallest lambda of an encoder sweep at which each head is pruned; a head no run prunes gets
    twice the largest lambda (it closes last). Sec. 6.2: the heads that survive longest are the ones to rank."""
    runs = sorted(runs, key=lambda r: r["lam"])
    never = 2 * max((float(r["lam"]) for r in runs), default=1.0)
    out = [[never] * n_heads for _ in range(n_layers)]
    for r in reversed(runs):
        m = r["retained"]["enc"]
        for l in range(n_layers):
            for h in range(n_heads):
                if not m[l][h]:
                    out[l][h] = float(r["lam"])
    return out


@dataclass(kw_only=True)
class FunctionsSurvive(Verdict):
    lam: object           # the run judged: the one keeping the most heads among those keeping <= a third
    kept: int
    before: list          # functions of the unpruned model: "positional", "syntactic:<rel>", "rare"
    after: list           # those present among that run's surviving heads, roles re-measured on the pruned model

    def numbers(self):
        return {"kept": float(self.kept), "functions_before": float(len(self.before)),
                "functions_after": float(len([f for f in self.before if f in self.after]))}

    def text(self):
        if self.lam is None:
            return "no run keeps a third of the heads or fewer"
        lost = [f for f in self.before if f not in self.after]
        return (f"{self.kept} heads kept (lambda {self.lam:g}): {len(self.before) - len(lost)} of {len(self.before)} "
                f"functions still present" + (f" (lost: {', '.join(lost)})" if lost else ""))


FORM_RELATIONS = 3   # "the head functions form": syntactic heads for at least this many of the four relations


def functions_form(record, n_relations=FORM_RELATIONS):
    """Whether one seed's head functions form, the two parts judged apart: (a positional head of the paper's kind,
    sec. 5.1: a +-1 head with >= :data:`POSITIONAL_SHARE` of its argmaxes on one offset; syntactic heads, sec. 5.2,
    for at least ``n_relations`` relations, each >= :data:`SYNTACTIC_MARGIN` over the offset baseline).
    ``record``: a seed of an emergence study, {"findings": {"positional", "syntactic"}} as their ``to_dict()``."""
    f = record["findings"]
    return bool(f["positional"]["heads"]), len(f["syntactic"]["relations_held"]) >= n_relations


def functions(report_roles, report, heads=None):
    """The functions a model's heads perform, as names: "positional", "syntactic:<relation>" per relation, "rare";
    ``heads``: only those (l, h) (the survivors); roles as :func:`minihead.roles.classify_heads` gives them."""
    keep = (lambda lh: True) if heads is None else (lambda lh: lh in heads)
    out = set()
    for lh, rs in report_roles.items():
        if keep(lh):
            out |= {r for r in rs if r != "syntactic"}
    for (rel, d), acc in report.acc.items():
        a = backend.to_host(acc)
        base = float(report.baseline[(rel, d)])
        if any(a[l, h] >= base + SYNTACTIC_MARGIN - 1e-12 for l in range(a.shape[0]) for h in range(a.shape[1])
               if keep((l, h))):
            out.add(f"syntactic:{rel}")
    return sorted(out)


def functions_survive(runs, before, n_heads, share=1 / 3):
    """Sec. 6.2, Figure 8: pruning down to a few heads, "all three functions remain" (positional, syntactic,
    rare-word at 17 of 48; the paper shows the functions of the heads LEFT after pruning). The run judged is the
    one keeping the most heads among those keeping at most ``share`` (a third) of the ``n_heads`` and at least one;
    ``runs`` carry ``functions_after`` (:func:`functions` of the pruned model, roles re-measured with its gates,
    survivors only) and ``before`` is the unpruned model's. Held when every function of ``before`` is still
    there. Untestable when no run keeps a third or fewer; not measured when the runs lack the re-measured roles."""
    eligible = [r for r in runs if 0 < r["n_retained"]["enc"] <= share * n_heads + 1e-12]
    if not eligible:
        return FunctionsSurvive(status="untestable", lam=None, kept=0, before=list(before), after=[],
                                reason=f"no run keeps between 1 and a third of the {n_heads} heads")
    run = max(eligible, key=lambda r: (r["n_retained"]["enc"], -r["lam"]))
    if run.get("functions_after") is None:
        return FunctionsSurvive(status="not measured", lam=float(run["lam"]), kept=run["n_retained"]["enc"],
                                before=list(before), after=[], reason="roles were not re-measured on the pruned models")
    after = list(run["functions_after"])
    return FunctionsSurvive(status=_judged(all(f in after for f in before)), lam=float(run["lam"]),
                            kept=int(run["n_retained"]["enc"]), before=list(before), after=after)


@dataclass(kw_only=True)
class TypeOrder(Verdict):
    """Judged over a seed's all-attention runs that pruned something; ``detail``: per run {lam, kept_share,
    holds}; ``excluded``: runs that pruned no head (uninformative)."""
    detail: list
    excluded: int = 0

    def numbers(self):
        out = {"runs": float(len(self.detail)), "runs_held": float(sum(d["holds"] for d in self.detail))}
        for k in ("enc", "dec_self", "dec_enc"):
            vals = [d["kept_share"][k] for d in self.detail if k in d["kept_share"]]
            out[f"kept_share_{k}"] = statistics.fmean(vals) if vals else None
        return out

    def text(self):
        runs = "; ".join(f"lambda {d['lam']:g}: " + " / ".join(f"{d['kept_share'][k]:.2f}" for k in
                                                               ("enc", "dec_self", "dec_enc")) for d in self.detail)
        return (f"share kept enc / dec-self / dec-enc: {runs or 'no informative run'}"
                + (f" ({self.excluded} run(s) pruning nothing left out)" if self.excluded else ""))


def _type_tally(runs, cfg, holds, kinds=("enc", "dec_self", "dec_enc")):
    """Judge ``holds(kept shares)`` in every run that pruned a head of one of ``kinds`` (the others say nothing)."""
    informative = [r for r in runs if any(n < cfg.n_layers(k) * cfg.n_heads for k, n in r["n_retained"].items()
                                          if k in kinds)]
    detail = []
    for r in informative:
        s = retained_shares(r, cfg)
        detail.append({"lam": float(r["lam"]), "kept_share": s, "holds": bool(holds(s))})
    excluded = len(runs) - len(informative)
    if not detail:
        return dict(status="untestable", detail=[], excluded=excluded,
                    reason=f"no run pruned a head of {' or '.join(k.replace('_', '-') for k in kinds)}")
    return dict(status=_judged(all(d["holds"] for d in detail)), detail=detail, excluded=excluded)


def encoder_pruned_first(runs, cfg):
    """Sec. 6.3 (Figure 9): "encoder self-attention heads ... are the first to be pruned": in every all-attention
    run that pruned some head, encoder self-attention keeps a strictly smaller share of its heads than BOTH
    decoder types. Runs that prune nothing say nothing and are left out (counted); none left: untestable."""
    return TypeOrder(**_type_tally(runs, cfg, lambda s: s["enc"] < s["dec_self"] and s["enc"] < s["dec_enc"]))


def decoder_encoder_last(runs, cfg):
    """Sec. 6.3 (Figure 9): "decoder-encoder attention heads are retained the longest": in every all-attention
    run that pruned some DECODER head, decoder-encoder attention keeps a strictly larger share of its heads than
    decoder self-attention (and than the encoder). A tie does not hold; a run that pruned no decoder head says
    nothing about the decoder's order and is left out (counted); none left: untestable."""
    return TypeOrder(**_type_tally(runs, cfg, lambda s: s["dec_enc"] > s["dec_self"] and s["dec_enc"] > s["enc"],
                                   kinds=("dec_self", "dec_enc")))


@dataclass(kw_only=True)
class DecoderLayers(Verdict):
    detail: list          # [(kind, mean layer, holds)] over the runs

    def numbers(self):
        out = {}
        for k in ("dec_self", "dec_enc"):
            vals = [ml for kind, ml, _ in self.detail if kind == k]
            out[f"mean_layer_{k}"] = statistics.fmean(vals) if vals else None
        return out

    def text(self):
        return "survivors' mean layer: " + ("; ".join(f"{k} {ml:.2f}" for k, ml, _ in self.detail) or "no type lost heads")


def decoder_layer_order(runs, cfg):
    """Sec. 6.3: "decoder self-attention survives mostly in lower layers, decoder-encoder attention in higher
    layers". For each all-attention run and each of the two decoder types that lost heads in it, the mean layer
    of its survivors must be below the middle layer (dec_self) or above it (dec_enc)
    (:func:`survivor_layers`). Held when every such check holds; untestable when no decoder type
    lost a head."""
    detail = [(k, float(ml), bool(h)) for r in runs for k, ml, h in survivor_layers(r, cfg)]
    if not detail:
        return DecoderLayers(status="untestable", detail=[], reason="no decoder type lost a head")
    return DecoderLayers(status=_judged(all(h for *_, h in detail)), detail=detail)


@dataclass(kw_only=True)
class PrunedVsScratch(Verdict):
    pairs: list           # [(pruned BLEU, from-scratch BLEU)] per configuration

    def numbers(self):
        gaps = [p - s for p, s in self.pairs]
        return {"bleu_gap": statistics.fmean(gaps) if gaps else None}

    def text(self):
        return "pruned - from scratch: " + (", ".join(f"{p - s:+.2f}" for p, s in self.pairs) or "no configuration")


def pruned_beats_scratch(pruned_bleu, scratch_bleu):
    """Sec. 6.3, Table 2: "pruned models beat the same configuration trained from scratch" (by 0.01-0.50 BLEU,
    7 of 7 configurations). One seed's pairs; the claim is judged pooled (:func:`pool_paired_gap`: the mean gap's
    95% interval above 0)."""
    if len(pruned_bleu) != len(scratch_bleu):
        raise ValueError(f"pruned_beats_scratch: {len(pruned_bleu)} pruned BLEU against {len(scratch_bleu)} "
                         "from scratch; give one of each per configuration")
    pairs = [(float(p), float(s)) for p, s in zip(pruned_bleu, scratch_bleu)]
    if not pairs:
        return PrunedVsScratch(status="untestable", pairs=[], reason="no configuration trained from scratch")
    return PrunedVsScratch(status=_judged(all(p > s for p, s in pairs)), pairs=pairs)


# --------------------------------------------------------------------------- what a sweep shows
# One copy of each reading of the sweeps, for chapters 5 and 6 and the reproduce report.
def specialised_share(retained, roles):
    """(share of heads with a role among the retained ones, share among all heads) for one (L, H) mask and
    roles {(l, h): set} from :func:`minihead.roles.classify_heads`. The paper's claim (sec. 6.2, Figure 8)
    is that the first exceeds the second."""
    m = backend.to_host(retained)
    heads = [(l, h) for l in range(m.shape[0]) for h in range(m.shape[1])]
    special = [lh for lh in heads if roles.get(lh)]
    kept = [lh for lh in heads if m[lh]]
    share_all = len(special) / len(heads)
    share_kept = (sum(1 for lh in kept if roles.get(lh)) / len(kept)) if kept else float("nan")
    return share_kept, share_all


def retained_shares(run, cfg):
    """kind -> share of that kind's heads retained by one run of :func:`minihead.stages.prune_study`."""
    return {k: n / (cfg.n_layers(k) * cfg.n_heads) for k, n in run["n_retained"].items()}


def type_order_holds(run, cfg):
    """Voita et al. sec. 8 at the end of one all-attention run: encoder self-attention keeps the smallest share
    of its heads, decoder-encoder attention the largest (enc <= dec_self <= dec_enc and enc < dec_enc)."""
    s = retained_shares(run, cfg)
    return s["enc"] <= s["dec_self"] <= s["dec_enc"] and s["enc"] < s["dec_enc"]


def half_closed_step(history, kind, n_heads):
    """First logged step of a pruning run's ``history`` at which at most half of the n_heads heads of ``kind``
    are open (None: never)."""
    return next((h["step"] for h in history if h["open"][kind] <= n_heads / 2), None)


def encoder_closes_first(run, cfg):
    """Along one all-attention run, encoder self-attention is the first type to lose half of its heads (another
    type may lose half at the same logged step, never earlier). Returns (holds, kind -> step or None)."""
    steps = {k: half_closed_step(run["history"], k, cfg.n_layers(k) * cfg.n_heads) for k in GATE_KINDS}
    holds = steps["enc"] is not None and all(t is None or t >= steps["enc"] for t in steps.values())
    return holds, steps


def mean_layer(mask):
    """Mean layer index (0 = lowest) of the retained heads of one (L, H) mask; 0 when none is retained."""
    m = xp.asarray(mask, dtype="float64")                                   # (L, H)
    return float((m.sum(1) * xp.arange(m.shape[0])).sum() / max(float(m.sum()), 1.0))


def survivor_layers(run, cfg):
    """Voita et al. sec. 8: decoder self-attention survives in the lower layers, decoder-encoder attention in
    the higher ones. For each of the two types that lost heads in ``run``: (kind, mean layer of its survivors,
    holds), holds = below the middle layer (n_dec_layers - 1) / 2 for dec_self, above it for dec_enc."""
    mid = (cfg.n_dec_layers - 1) / 2
    out = []
    for k, below in (("dec_self", True), ("dec_enc", False)):
        if k in run["n_retained"] and run["n_retained"][k] < cfg.n_layers(k) * cfg.n_heads:
            ml = mean_layer(run["retained"][k])
            out.append((k, ml, ml < mid if below else ml > mid))
    return out


# --------------------------------------------------------------------------- pooled over seeds
FISHER_VAR = 1.06   # var(atanh(Spearman rho)) ~ 1.06 / (n - 3) (Fieller, Hartley & Pearson 1957)


def _normal_sf(x):
    """P(Z > x) for a standard normal Z: erfc(x / sqrt 2) / 2."""
    return 0.5 * math.erfc(x / math.sqrt(2))


def pool_rho(rhos, ns):
    """One-sided test that a rank correlation is positive, pooled over seeds by Fisher's z: z_i = atanh(rho_i) with
    variance 1.06 / (n_i - 3); the pooled z is their inverse-variance mean and Z = z / its standard error.
    Returns {"rho": tanh(pooled z), "p": P(Z >= z | no correlation), "seeds": k} (None values when no seed has a
    rho and n > 3)."""
    used = [(max(-0.9999, min(0.9999, float(r))), int(n)) for r, n in zip(rhos, ns)
            if r is not None and not math.isnan(r) and n > 3]
    if not used:
        return {"rho": None, "p": None, "seeds": 0}
    w = [(n - 3) / FISHER_VAR for _, n in used]
    z = sum(wi * math.atanh(r) for wi, (r, _) in zip(w, used)) / sum(w)
    return {"rho": math.tanh(z), "p": _normal_sf(z * math.sqrt(sum(w))), "seeds": len(used)}


def pool_role_difference(per_seed, n_perm=10000, seed=0):
    """One-sided permutation test, stratified by seed, that heads with a role carry more than the others:
    statistic = sum over seeds of (mean of role heads - mean of the others); the role flags are permuted within
    each seed ``n_perm`` times (a fixed generator: same numbers on every run). ``per_seed``: [(values, flags)].
    Returns {"difference": mean per-seed difference, "p": (1 + #(perm >= observed)) / (1 + n_perm), "seeds": k}."""
    used = [(list(v), list(f)) for v, f in per_seed if any(f) and not all(f)]
    if not used:
        return {"difference": None, "p": None, "seeds": 0}

    def stat(pairs):
        return sum(statistics.fmean([x for x, r in zip(v, f) if r]) - statistics.fmean([x for x, r in zip(v, f) if not r])
                   for v, f in pairs)
    obs = stat(used)
    rng = random.Random(seed)
    hits = 0
    for _ in range(n_perm):
        perm = []
        for v, f in used:
            g = f[:]
            rng.shuffle(g)
            perm.append((v, g))
        hits += stat(perm) >= obs - 1e-12
    return {"difference": obs / len(used), "p": (1 + hits) / (1 + n_perm), "seeds": len(used)}


def pool_paired_gap(pairs, level=0.95):
    """Mean of pruned - from-scratch BLEU over every configuration of every seed, with its two-sided ``level``
    t-interval (configurations taken as independent). Returns {"gap", "low", "high", "n"} (None bounds below 2
    pairs)."""
    gaps = [p - s for p, s in pairs]
    if len(gaps) < 2:
        return {"gap": gaps[0] if gaps else None, "low": None, "high": None, "n": len(gaps)}
    m, sd = statistics.fmean(gaps), statistics.stdev(gaps)
    from scipy import stats   # here: scipy.stats takes about a second to import, and only this interval needs it
    half = float(stats.t.ppf(0.5 + level / 2, len(gaps) - 1)) * sd / math.sqrt(len(gaps))
    return {"gap": m, "low": m - half, "high": m + half, "n": len(gaps)}


def _pooled_rho(verdicts):
    if any(v["status"] == "not measured" for v in verdicts):
        return "not measured", "", {}
    t = pool_rho([v["rho"] for v in verdicts], [v["n"] for v in verdicts])
    if t["p"] is None:
        return "untestable", "no seed has a rank correlation over more than 3 heads", t
    return _judged(t["rho"] > 0 and t["p"] < ALPHA), "", t


def _pooled_roles(verdicts):
    if any(v["status"] == "not measured" for v in verdicts):
        return "not measured", "", {}
    t = pool_role_difference([(v["values"], v["roles"]) for v in verdicts])
    if t["p"] is None:
        return "untestable", "in every seed every head or no head has a role", t
    return _judged(t["difference"] > 0 and t["p"] < ALPHA), "", t


def _pooled_gap(verdicts):
    pairs = [tuple(p) for v in verdicts for p in v.get("pairs", [])]
    t = pool_paired_gap(pairs)
    if t["low"] is None:
        return "untestable", "fewer than two configurations trained from scratch", t
    return _judged(t["low"] > 0), "", t


# --------------------------------------------------------------------------- every finding of one model
# name -> (what the paper claims, the paper's number, the criterion in brief); the order of the report's rows
_N48 = paper.SETTING["encoder_heads"]
_N_TABLE2 = sum(len(rows) for rows in paper.TABLE2.values())
_GAPS_TABLE2 = [pruned - scratch for rows in paper.TABLE2.values() for _, pruned, scratch in rows]   # BLEU
FINDINGS = {
    "few_heads": ("a few heads carry most relevance", "few heads dominate each layer (Fig. 1)",
                  f"every layer's top quarter holds >= uniform + {FEW_HEADS_MARGIN:.2f}; >= {FEW_HEADS_MIN} heads a layer"),
    "role_relevance": ("the heads with a role carry more relevance", "the important heads are the specialised ones",
                       f"role heads' mean relevance above the others', pooled permutation test p < {ALPHA:g}"),
    "role_ablation": ("removing a head with a role costs more BLEU", "(not measured in the paper)",
                      f"role heads' mean ablation BLEU drop above the others', pooled permutation test p < {ALPHA:g}"),
    "relevance_ablation": ("relevance agrees with single-head ablation", "(the paper checks LRP by pruning)",
                           f"Spearman rho > 0, Fisher z pooled over seeds, p < {ALPHA:g}"),
    "confident": ("important heads are confident", "important heads tend to be confident",
                  f"Spearman rho(relevance, confidence) > 0, pooled, p < {ALPHA:g}"),
    "relevance_closing": ("relevant heads are pruned last", "specialised (relevant) heads are last to be pruned",
                          f"Spearman rho(relevance, lambda at which the head closes) > 0, pooled, p < {ALPHA:g}"),
    "positional": ("positional heads", f"{paper.SURVIVOR_ROLES_AT_48['positional']} of {_N48} heads (WMT)",
                   f">= {POSITIONAL_SHARE:.0%} of a head's argmaxes on -1 or +1"),
    "syntactic": ("syntactic heads", "nsubj, obj, amod, advmod (Table 1)",
                  f"a head >= {SYNTACTIC_MARGIN * 100:.0f} points above the fixed-offset baseline"),
    "rare_word": ("a rare-word head", f"{paper.RARE['rarest']['OpenSubtitles']:.0%} on the rarest token (OpenSubtitles)",
                  f"a first-layer head with >= {RARE_SHARE:.0%} of its argmaxes on the rarest token, sentences whose "
                  f"rarest token is outside the top {RARE_TOP_N}"),
    "prunable": ("most encoder heads prunable at small cost", "{1} of {0} kept, {2:+.2f} BLEU ({3})".format(
                     _N48, *paper.ENCODER_PRUNING[0][1:], paper.ENCODER_PRUNING[0][0].split()[0]),
                 f"a run keeping <= a third of the heads within {PRUNE_BLEU_TOLERANCE:g} BLEU of the lambda = 0 run "
                 "at the same step"),
    "functions_survive": ("the head functions survive pruning", f"all three functions remain at 17 of {_N48} heads",
                          "every function of the unpruned model among the survivors of the run keeping about a "
                          "third, roles re-measured on the pruned model"),
    "role_closing": ("heads with a role are pruned last", "the specialised heads are last to be pruned (Fig. 8)",
                     f"Spearman rho(role score, lambda at which the head closes) > 0, pooled, p < {ALPHA:g}"),
    "encoder_first": ("encoder self-attention pruned first", "yes (Fig. 9)",
                      "encoder's kept share below both decoder types' in every run that pruned a head"),
    "dec_enc_last": ("decoder-encoder attention pruned last", "yes (Fig. 9)",
                     "decoder-encoder's kept share above decoder self-attention's in every run that pruned a head"),
    "decoder_layers": ("decoder self-attention survives in lower layers, decoder-encoder in higher", "yes (Fig. 9)",
                       "survivors' mean layer below / above the middle"),
    "pruned_vs_scratch": ("pruned beats the same configuration from scratch",
                          f"{_N_TABLE2} of {_N_TABLE2} configurations, +{min(_GAPS_TABLE2):.2f} to +{max(_GAPS_TABLE2):.2f} BLEU "
                          "(Table 2)",
                          "mean paired gap's 95% interval above 0, pooled over seeds"),
}
POOLED = {"relevance_ablation": _pooled_rho, "confident": _pooled_rho, "relevance_closing": _pooled_rho,
          "role_closing": _pooled_rho, "role_relevance": _pooled_roles, "role_ablation": _pooled_roles,
          "pruned_vs_scratch": _pooled_gap}
PER_SEED = tuple(n for n in FINDINGS if n not in POOLED)


def what(name):
    """The finding's name in words."""
    return FINDINGS[name][0] if name in FINDINGS else name


def importance_verdicts(summary, n_heads=4, n=None):
    """The relevance findings of sec. 4 (few heads, relevance ~ ablation, important heads confident) from
    :func:`minihead.stages.importance_summary`, judged on the paper's z-rule with magnitude shares
    |r_h| / sum_h' |r_h'| per prediction: the signed shares of a layer nearly cancel on these models, so they
    neither form a share nor rank heads (chapter 2, sec. 3.3). ``n``: encoder heads the rhos are over."""
    n = n if n is not None else len(summary["top_quarter_share_abs"]) * n_heads
    return {"few_heads": few_heads(summary["top_quarter_share_abs"], n_heads),
            "relevance_ablation": relevance_agrees_with_ablation(summary["rho_relevance_ablation_abs"], n,
                                                                 summary.get("rho_relevance_ablation_official")),
            "confident": important_heads_confident(summary["rho_relevance_confidence_abs"], n,
                                                   summary.get("rho_relevance_confidence_official"))}


def relevance_verdicts(summary, imp, roles_of_heads, n_heads, n=None):
    """Sec. 4's findings of one model, with the roles of sec. 5: :func:`importance_verdicts` (few heads, relevance ~
    ablation, important heads confident) and, given the importance stage ``imp``
    (:func:`minihead.stages.importance_stage`), whether the heads with a role (``roles_of_heads`` {(l, h): set}, on
    the judged trees) carry more magnitude-share relevance and cost more BLEU when switched off alone
    (:func:`role_heads_differ`)."""
    out = importance_verdicts(summary, n_heads, n)
    if imp is not None:
        out["role_relevance"] = role_heads_differ(imp["relevance_abs"]["enc"], roles_of_heads)
        out["role_ablation"] = role_heads_differ(imp["ablation"]["enc"], roles_of_heads)
    return out


def study_verdicts(summary, report, enc, allk, scratch, cfg, imp=None, functions_before=None):
    """Every finding of :data:`FINDINGS` for one model, as {name: Verdict}, from the stages of
    ``python -m minihead reproduce``: ``summary`` (:func:`minihead.stages.importance_summary`), ``report``
    (head roles on the test trees, :func:`minihead.analysis.head_roles`), ``enc`` and ``allk`` (the encoder and
    all-attention pruning runs, each encoder run with its step-matched ``ref_bleu`` and ``functions_after``),
    ``scratch`` (from-scratch trainings of the last ``len(scratch)`` all-attention configurations), the model's
    ``cfg`` and ``imp`` (the importance stage: per-head relevance and ablation)."""
    n_enc = cfg.n_enc_layers * cfg.n_heads
    paired = allk[-len(scratch):] if scratch else []
    out = relevance_verdicts(summary, imp, report.roles, cfg.n_heads, n_enc)
    roles_now = report.roles
    rel = imp["relevance_abs"]["enc"] if imp else None
    closing = closing_lambda(enc, cfg.n_enc_layers, cfg.n_heads) if enc else None
    out["relevance_closing"] = (rank_agreement(spearman(rel, closing), n_enc) if imp is not None and closing
                                else not_measured("no encoder sweep or no relevance"))
    out.update(positional=positional(report), syntactic=syntactic(report), rare_word=rare_word(report, relevance=rel),
               prunable=most_encoder_heads_prunable(enc, n_enc),
               functions_survive=functions_survive(enc, functions_before or functions(roles_now, report), n_enc),
               role_closing=(rank_agreement(spearman(role_score(report), closing), n_enc) if closing
                             else not_measured("no encoder sweep")),
               encoder_first=encoder_pruned_first(allk, cfg), dec_enc_last=decoder_encoder_last(allk, cfg),
               decoder_layers=decoder_layer_order(allk, cfg),
               pruned_vs_scratch=pruned_beats_scratch([r["bleu"] for r in paired], [sc["bleu"] for sc in scratch]))
    return {n: out[n] for n in FINDINGS if n in out}


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
    ``to_dict()``}. Returns, per finding in the order first seen, {"status", "reason", "held_in", "of",
    "testable", "pooled", "numbers": {name: (mean, sd, per-seed values)}}:

    * a per-model finding: "holds" when it holds in every seed where it is testable (and some seed is),
      "varies" in some, "does not hold" in none; "untestable" / "not measured" when no seed could judge it;
    * a pooled finding (:data:`POOLED`): the status of its pooled test, whose numbers are under "pooled".

    ``held_in`` counts the seeds whose own verdict holds (for a pooled finding: whose own rho or difference has
    the claimed sign, shown, not judged)."""
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
        statuses = [v.get("status", "holds" if v.get("held") else "does not hold") for v in verdicts]
        judged = [s for s in statuses if s in ("holds", "does not hold")]
        k, n = statuses.count("holds"), len(verdicts)
        reasons = [v.get("reason", "") for v in verdicts if v.get("reason")]
        pooled = None
        if name in POOLED:
            status, reason, pooled = POOLED[name](verdicts)
            reason = reason or (reasons[0] if status in ("untestable", "not measured") and reasons else "")
        elif not judged:
            status = "not measured" if "not measured" in statuses else "untestable"
            reason = reasons[0] if reasons else ""
        else:
            status = "holds" if k == len(judged) else "does not hold" if k == 0 else "varies"
            reason = ""
        keys = list(dict.fromkeys(key for v in verdicts for key in v.get("numbers", {})))
        out[name] = {"status": status, "reason": reason, "held_in": k, "of": n, "testable": len(judged),
                     "pooled": pooled,
                     "numbers": {key: _mean_sd([v.get("numbers", {}).get(key) for v in verdicts]) for key in keys}}
    return out


# --------------------------------------------------------------------------- the chapters' closing claims
def study_text(name, f):
    """The study's verdict of finding ``name`` in words: the pooled test's numbers, or the seeds it holds in."""
    if f["status"] in ("untestable", "not measured"):
        return f"{f['status']}: {f['reason']}"
    p = f.get("pooled") or {}
    if "rho" in p:
        return f"pooled rho {fmt(p['rho'])} over {p['seeds']} seeds, p = {fmt3(p['p'])}"
    if "difference" in p:
        return f"mean difference {fmt3(p['difference'])} over {p['seeds']} seeds, p = {fmt3(p['p'])}"
    if "gap" in p:
        return (f"mean gap {fmt(p['gap'])} BLEU over {p['n']} configurations, 95% interval "
                f"[{fmt(p['low'])}, {fmt(p['high'])}]")
    return f"holds in {f['held_in']} of {f['testable']} seeds"


def check_claims(summary, verdicts, names=None, log=print):
    """The closing check of a chapter: each finding in ``names`` (default: every finding of ``verdicts``) judged
    on the chapter's own model (``verdicts``: {name: Verdict}) against the study over seeds (``summary``:
    :func:`summarize`):

    * study status "holds": a claim. A per-model finding is asserted to hold for this model as well; a pooled
      one is a statement about the seeds together, so this model's number is shown, not asserted;
    * "varies": shown with this model's verdict, asserted neither way;
    * "does not hold": stated as not reproduced at this scale, with the numbers;
    * "untestable" / "not measured": said so, with the reason.

    Returns {name: status}; raises AssertionError naming the finding and both verdicts when a claim fails here."""
    names = list(verdicts) if names is None else list(names)
    out = {}
    for name in names:
        if name not in summary:
            raise KeyError(f"check_claims: the study has no finding {name!r} (it has {', '.join(summary)})")
        f, v = summary[name], verdicts[name]
        status = f.get("status")
        here = v.text() if isinstance(v, Verdict) else str(v.get("numbers", {}))
        held = bool(v.held if isinstance(v, Verdict) else v["held"])
        study = study_text(name, f)
        if status == "holds":
            log(f"CLAIM  {what(name)}: {study}; this model: {here}")
            if name not in POOLED:
                assert held, f"{what(name)} ({name}) holds in every seed of the study ({study}) but not here: {here}"
        elif status == "varies":
            log(f"SHOWN  {what(name)}: {study} (not a claim); this model: {here}")
        elif status == "does not hold":
            log(f"NOT REPRODUCED at this scale  {what(name)}: {study}; this model: {here}")
        else:
            log(f"{status.upper()}  {what(name)}: {f['reason']}; this model: {here}")
        out[name] = status
    return out


def findings_table(summary, names=None, model=None):
    """A chapter's (and the README's) findings table in markdown: finding / paper / this project over seeds /
    criterion / verdict (with the reason where it is not "holds"). ``summary``: :func:`summarize` of a study;
    ``names``: the rows (default every finding of the study, in :data:`FINDINGS` order)."""
    names = [n for n in FINDINGS if n in summary] if names is None else list(names)
    rows = ["| finding | paper | this project | criterion | verdict |", "|---|---|---|---|---|"]
    for n in names:
        f = summary[n]
        _, theirs, crit = FINDINGS.get(n, (n, "-", "-"))
        verdict = {"holds": "**holds**", "varies": f"varies ({f['held_in']} of {f['testable']} seeds)"}.get(
            f["status"], f["status"])
        rows.append(f"| {what(n)} | {theirs} | {study_numbers(n, f)} | {crit} | {verdict} |")
    return "\n".join(rows)


def study_numbers(name, f):
    """This project's numbers of one finding over seeds, in words (means, per-seed values where they decide)."""
    m = {k: v[0] for k, v in f["numbers"].items()}
    vals = {k: v[2] for k, v in f["numbers"].items()}

    def seeds(k, form="{:.2f}"):
        return ", ".join("-" if x is None else form.format(x) for x in vals.get(k, []))
    if name in POOLED or f["status"] in ("untestable", "not measured"):
        text = study_text(name, f)
        if name in ("relevance_ablation", "confident", "relevance_closing", "role_closing") and "rho" in m:
            text += f" (per seed {seeds('rho')})"
        return text
    if name == "few_heads":
        return f"weakest layer's top-quarter share {fmt(m.get('top_quarter_min'))}"
    if name == "positional":
        return f"best head {fmt(m['share'])} on its offset (confidence {fmt(m['confidence'])}); heads per seed {seeds('n_heads', '{:.0f}')}"
    if name == "syntactic":
        return "best margin, points: " + ", ".join(f"{r} {m['margin_' + r] * 100:+.0f}" for r in RELATIONS
                                                   if m.get("margin_" + r) is not None)
    if name == "rare_word":
        return f"best first-layer head {fmt(m.get('share'))} on the rarest token ({fmt(m.get('share_over_chance'))}x chance)"
    if name == "prunable":
        return f"fewest heads kept within {PRUNE_BLEU_TOLERANCE:g} BLEU, per seed: {seeds('kept', '{:.0f}')}"
    if name == "functions_survive":
        return "functions left / before, per seed: " + ", ".join(
            f"{'-' if a is None else int(a)}/{'-' if b is None else int(b)}"
            for a, b in zip(vals.get("functions_after", []), vals.get("functions_before", [])))
    if name in ("encoder_first", "dec_enc_last"):
        return ("share kept: enc " + ", dec-self ".join([fmt(m.get("kept_share_enc")), fmt(m.get("kept_share_dec_self"))])
                + f", dec-enc {fmt(m.get('kept_share_dec_enc'))}")
    if name == "decoder_layers":
        return (f"survivors' mean layer: dec-self {fmt(m.get('mean_layer_dec_self'))}, dec-enc "
                f"{fmt(m.get('mean_layer_dec_enc'))}")
    return "; ".join(f"{k} {fmt(x)}" for k, x in m.items() if x is not None)


def fmt(x):
    """A number as the study's tables print it: two decimals for a float, as is otherwise, "-" for None."""
    return "-" if x is None else f"{x:.2f}" if isinstance(x, float) else str(x)


def fmt3(x):
    """A p-value or small difference: three significant digits, "-" for None."""
    return "-" if x is None else f"{x:.3g}"
