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
  OpenSubtitles); "far above" is read here as at least ``RARE_FACTOR`` times the chance rate 1 / T.
"""
from dataclasses import asdict, dataclass

from . import backend, paper
from .roles import RELATIONS

POSITIONAL_SHARE = paper.POSITIONAL["threshold"]          # 0.9 of the queries on one offset
POSITIONAL_CONFIDENCE = paper.POSITIONAL["min_confidence"]  # confidence > 0.8
SYNTACTIC_MARGIN = paper.SYNTACTIC_MARGIN                 # 10 points over the fixed-offset baseline
RARE_FACTOR = paper.RARE_FACTOR                           # share on the rarest token / chance
FEW_HEADS_MARGIN = paper.FEW_HEADS_MARGIN                 # top-quarter relevance share over uniform


@dataclass
class Verdict:
    """``held`` and the numbers behind it; ``to_dict`` gives JSON-able plain values."""
    held: bool

    def to_dict(self):
        return asdict(self)


@dataclass
class Positional(Verdict):
    share: float          # best head's share of argmaxes on its offset (queries where the offset exists)
    share_all: float      # the same head's share over all queries (the first / last word counted as a miss)
    offset: int           # -1 or +1
    head: tuple           # (layer, head)
    confidence: float     # that head's confidence
    heads: list           # every (layer, head, offset) meeting both criteria


@dataclass
class Syntactic(Verdict):
    relations_held: list  # relations with a head >= baseline + margin in some direction
    best_margins: list    # [(relation, direction, margin)] of each relation's best direction
    heads: list           # [(relation, direction, layer, head, accuracy, baseline)] meeting the criterion


@dataclass
class FewHeads(Verdict):
    top_quarter: list     # per layer: share of the layer's relevance held by its top quarter of heads
    uniform: float        # that share if every head had the same relevance (0.25)


def few_heads(top_quarter_shares, margin=FEW_HEADS_MARGIN):
    """Sec. 4, "only a few heads carry most of the relevance": held when every layer's top-quarter share is
    >= 0.25 + ``margin``. ``top_quarter_shares``: one share per layer, from magnitude or official-rule
    relevance (signed z-rule shares can exceed 1 where heads cancel, so they are not a share of anything)."""
    tq = [float(t) for t in top_quarter_shares]
    return FewHeads(held=bool(tq) and all(t >= 0.25 + margin - 1e-12 for t in tq), top_quarter=tq, uniform=0.25)


@dataclass
class RareWord(Verdict):
    share: object         # best head's share of queries whose argmax is the rarest token (None: no sentence)
    chance: object        # chance rate (mean 1 / T) over the same queries
    head: object          # (layer, head) of the best head, or None


def positional(report, share=POSITIONAL_SHARE, confidence=POSITIONAL_CONFIDENCE):
    """Sec. 5.1 on a :class:`minihead.analysis.RolesReport`: a head with >= ``share`` of its argmaxes on -1
    or on +1, counted over the queries where that offset exists (``report.shares_possible``, so the verdict
    does not depend on sentence length), and confidence > ``confidence``."""
    sp = backend.to_host(report.shares_possible)                                # (L, H, 2)
    sa = backend.to_host(report.shares)                                         # (L, H, 2)
    conf = backend.to_host(report.confidence)                                   # (L, H)
    lh, k = divmod(int(sp.argmax()), 2)                                          # flat index of (L, H, 2)
    l, h = divmod(lh, sp.shape[1])
    heads = [(li, hi, (-1, 1)[ki]) for li in range(sp.shape[0]) for hi in range(sp.shape[1])
             for ki in range(2) if sp[li, hi, ki] >= share and conf[li, hi] > confidence]
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

