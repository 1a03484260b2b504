"""Need accuracy: does the model write the target markers that depend on ANOTHER source word?

The synthetic target language of ``data_small/`` (``minihead/data/synth.py``; data_small/README.md, sections
"Target rules" and "Worked examples") has designed-in *needs*, markers whose form the decoder cannot read off the
word it translates, so the encoder has to bring it from a neighbour or a relative:

* ``sandhi`` (positional, +1): the token of a determiner, a frequent noun, an adjective, an adverb or a verb ends
  in ``-k`` / ``-m`` / ``-t``, chosen by the first letter of the NEXT source token (``SANDHI``);
* ``nsubj`` / ``obj`` (dependent -> verb): the subject's / object's head noun takes a case suffix chosen by its
  verb's hidden class, fused before the sandhi ending (``stem[en]CASE-sandhi``); after a name the case is a
  particle token of its own (aligned to the verb);
* ``advmod`` (adverb -> verb): the adverb takes ``ADV_SUFFIX`` of its verb's class (before the sandhi ending);
* ``amod`` (adjective -> noun): the adjective takes ``GENDER_SUFFIX`` of its noun's gender (ditto).

:func:`need_marks` lists, per reference target token, the needs it carries and their markers, derived from the
gold tree and the lexicon by the generator's own rules; :func:`teacher_forced_scores` and :func:`greedy_scores`
count how often a model's tokens carry them. The control language (``data_small/control``) has none of these.
"""
import difflib
import itertools
import math
import random

from . import findings, model
from .backend import to_host, xp
from .importance import rank_agreement
from .data import synth
from .data.vocab import batches
from .errors import DataError
from .evaluate import bleu
from .translate import translate

NEEDS = ("sandhi", "nsubj", "obj", "advmod", "amod")
SURVIVES = 0.05      # a need survives an ablation that costs its teacher-forced accuracy less than this (0-1 scale)
SANDHI_CARRIERS = ("DET", "ADJ", "ADV", "VERB")   # plus frequent nouns (kind "noun"); see synth.translate


# --------------------------------------------------------------------------- the marks of a reference
def _case(lex, rel, vclass):
    """The case marker of a subject (nsubj) or object (obj) of a verb of class ``vclass``."""
    return (lex.subj_case_tgt if rel == "nsubj" else lex.case_tgt)[vclass]


def _word_marks(tree, lex, i):
    """Needs of the target token that translates source word i (not a case particle)."""
    tok, upos, rel, head = tree.tokens[i], tree.upos[i], tree.deprels[i], tree.heads[i] - 1
    marks = {}
    if upos in SANDHI_CARRIERS or (upos == "NOUN" and lex.by_form[tok][0].kind == "noun"):
        marks["sandhi"] = synth.SANDHI[synth.sandhi_class(tree.tokens[i + 1])]
    if upos == "NOUN" and rel in ("nsubj", "obj"):   # the case fused on a subject's / object's head noun
        marks[rel] = _case(lex, rel, lex.by_form[tree.tokens[head]][0].vclass)
    if upos == "ADV":
        marks["advmod"] = synth.ADV_SUFFIX[lex.by_form[tree.tokens[head]][0].vclass]
    if upos == "ADJ":
        marks["amod"] = synth.GENDER_SUFFIX[lex.by_form[tree.tokens[head]][0].gender]
    return marks


def need_marks(tree, lex):
    """One dict per target token of the reference translation of ``tree``: ``{need: marker}`` for each need the
    token carries (``{}`` for none). The token order comes from :func:`minihead.data.synth.translate` itself (its
    synonym choice changes stems only); a case particle after a name is aligned to its verb and marked
    ``{"nsubj": particle}`` or ``{"obj": particle}``, the role read off the name just before it. The rules are those
    of data_small (fused case); the ``--particles`` variant and the control are other languages."""
    try:
        _, align = synth.translate(tree, lex, random.Random(0))
    except KeyError as exc:
        raise DataError(f"{exc.args[0]!r} is not a word of this lexicon (wrong seed or data set?)") from None
    marks = []
    for k, i in enumerate(align):
        if tree.upos[i] == "VERB" and i in align[k + 1:]:   # a verb's own token comes last: this is a particle
            rel = tree.deprels[align[k - 1]]                   # the name the particle follows: nsubj or obj
            marks.append({rel: _case(lex, rel, lex.by_form[tree.tokens[i]][0].vclass)})
        else:
            marks.append(_word_marks(tree, lex, i))
    return marks


# --------------------------------------------------------------------------- checking a token
def strip_sandhi(token):
    """The token without its sandhi ending (``"laiko-k"`` -> ``"laiko"``); unchanged when it has none."""
    head, dash, tail = token.rpartition("-")
    return head if dash and head and tail in synth.SANDHI else token


def marker_ok(token, need, marker):
    """Whether ``token`` carries ``marker`` as the rule writes it: sandhi, the ending ``-marker``; a fused case,
    an adverb or adjective suffix, the token without its sandhi ending ends with ``marker``. A case particle
    passes by being the marker (the same test: the marks do not tell a particle from a fused case)."""
    if need == "sandhi":
        return token.endswith("-" + marker)
    return strip_sandhi(token).endswith(marker)


def _ends_in_stem(base):
    """Whether ``base`` can be a target stem left by removing a marker: every generated stem ends in a consonant
    (synth: ``final_coda=1.0``), and a case particle leaves nothing."""
    return base == "" or base[-1] not in "aeiouy"


def stem(token, cases=()):
    """The token with every marker of the rules stripped: the sandhi ending, then the longest case marker (one of
    ``cases``), else the longest adjective / adverb suffix, that leaves a stem (:func:`_ends_in_stem`); a case
    particle becomes "". (An adverb "...rd" + "e" would lose "de" were "de" a case; data_small has no such case.)"""
    base = strip_sandhi(token)
    for suffixes in (cases, synth.GENDER_SUFFIX + synth.ADV_SUFFIX):
        cut = max((len(s) for s in suffixes if base.endswith(s) and _ends_in_stem(base[:len(base) - len(s)])),
                  default=0)
        if cut:
            return base[:len(base) - cut]
    return base


# --------------------------------------------------------------------------- scores
def _tally(with_matched=False):
    return {n: {"correct": 0, "total": 0, **({"matched": 0} if with_matched else {})} for n in NEEDS}


def _finish(tally, over="total"):
    for t in tally.values():
        t["accuracy"] = t["correct"] / t[over] if t[over] else None
    return tally


def _check_lengths(tokens, marks, what):
    if len(tokens) != len(marks):
        raise DataError(f"{len(tokens)} {what} sentences but {len(marks)} marked references")
    for k, (toks, ms) in enumerate(zip(tokens, marks), start=1):
        if len(toks) != len(ms):
            raise DataError(f"sentence {k}: {len(toks)} {what} tokens but {len(ms)} marks")


def teacher_forced_scores(pred_tokens, marks):
    """``{need: {"correct", "total", "accuracy"}}`` of predictions made under teacher forcing, ``pred_tokens[s][j]``
    the model's token at reference position j of sentence s (aligned 1:1 with ``marks[s]``)."""
    _check_lengths(pred_tokens, marks, "predicted")
    tally = _tally()
    for preds, ms in zip(pred_tokens, marks):
        for tok, m in zip(preds, ms):
            for need, marker in m.items():
                tally[need]["total"] += 1
                tally[need]["correct"] += marker_ok(tok, need, marker)
    return _finish(tally)


def align_stems(hyp, ref, cases=()):
    """``{reference position: hypothesis position}`` of a monotone alignment of the two stem sequences
    (``difflib.SequenceMatcher``'s matching blocks)."""
    sm = difflib.SequenceMatcher(None, [stem(t, cases) for t in ref], [stem(t, cases) for t in hyp],
                                 autojunk=False)
    return {a + k: b + k for a, b, size in sm.get_matching_blocks() for k in range(size)}


def greedy_scores(hyp_tokens, ref_tokens, marks):
    """``{need: {"correct", "total", "matched", "accuracy"}}`` of free translations: each hypothesis is aligned to
    its reference on the stems (:func:`align_stems`, the case markers taken from ``marks``), and each marked
    reference position the alignment matched is scored on its hypothesis token; accuracy is over the matched
    positions (``matched / total`` says how many could be scored)."""
    _check_lengths(ref_tokens, marks, "reference")
    if len(hyp_tokens) != len(ref_tokens):
        raise DataError(f"{len(hyp_tokens)} hypotheses but {len(ref_tokens)} references")
    cases = sorted({mk for ms in marks for m in ms for n, mk in m.items() if n in ("nsubj", "obj")})
    tally = _tally(with_matched=True)
    for hyp, ref, ms in zip(hyp_tokens, ref_tokens, marks):
        pos = align_stems(hyp, ref, cases)
        for j, m in enumerate(ms):
            for need, marker in m.items():
                t = tally[need]
                t["total"] += 1
                if j in pos:
                    t["matched"] += 1
                    t["correct"] += marker_ok(hyp[pos[j]], need, marker)
    return _finish(tally, over="matched")


# --------------------------------------------------------------------------- a model's predictions
def teacher_forced_predictions(params, cfg, vocab, src_sents, tgt_sents, max_tokens=3000, gates=None):
    """The model's argmax token (a string) at each reference position under teacher forcing, per sentence in the
    input order: ``out[s][j]`` is predicted from the source and the reference prefix ``tgt_sents[s][:j]``."""
    src_ids = [vocab.encode(s) for s in src_sents]
    tgt_ids = [vocab.encode(t) for t in tgt_sents]
    out = [None] * len(src_ids)
    for batch in batches(src_ids, tgt_ids, max_tokens):   # sorted by length: batch.index restores the order
        logits, _ = model.forward(params, cfg, batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask,
                                  gates)                                       # (B, T, V)
        ids = to_host(logits.argmax(-1)).tolist()                             # (B, T) host ints
        for row, i in enumerate(batch.index):
            out[i] = [vocab.itos[t] for t in ids[row][:len(tgt_ids[i])]]      # drop the EOS step and padding
    return out


def need_scores(params, cfg, vocab, src_sents, tgt_sents, trees, lex, gates=None):
    """``{"teacher_forced": ..., "greedy": ...}``: :func:`teacher_forced_scores` and :func:`greedy_scores` (greedy
    translations by :func:`minihead.translate.translate`) of the references' needs (``trees``: their gold source
    trees, ``lex``: the data set's :class:`~minihead.data.synth.Lexicon`)."""
    marks = [need_marks(t, lex) for t in trees]
    _check_lengths(tgt_sents, marks, "reference")   # a reference of another language or lexicon fails here
    preds = teacher_forced_predictions(params, cfg, vocab, src_sents, tgt_sents, gates=gates)
    hyps = translate(params, cfg, vocab, src_sents, gates=gates)
    return {"teacher_forced": teacher_forced_scores(preds, marks), "greedy": greedy_scores(hyps, tgt_sents, marks)}


# --------------------------------------------------------------------------- the head x need matrix
def encoder_gates(cfg, off=()):
    """Gates of every attention type (kind -> (L, H)), 1 everywhere except the encoder heads ``off`` ((layer,
    head) pairs), which are 0: those heads switched off, as in single-head ablation (Michel et al. 2019)."""
    gates = {k: xp.ones((cfg.n_layers(k), cfg.n_heads), dtype=cfg.dtype) for k in model.GATE_KINDS}   # (L, H)
    for layer, head in off:
        gates["enc"][layer, head] = 0.0
    return gates


def ablation_matrix(params, cfg, vocab, src_sents, tgt_sents, trees, lex, n_bleu=300, survives=SURVIVES,
                    predict=None, translate_fn=None):
    """Which encoder head does which job: the drop of every need's teacher-forced accuracy (0-1) when ONE encoder
    head is switched off, and of corpus BLEU (points) on greedy translations of the first ``n_bleu`` pairs.

        drop[l, h, need] = acc(need | all heads) - acc(need | head h of layer l off)

    A need that every single ablation leaves standing (its drop below ``survives`` for every head: the job is
    shared, or done twice) is then ablated by pairs: every pair of heads of one layer switched off together. No
    LRP or gradient is involved: this is the ground truth the importance measures are judged against (a head the
    matrix shows doing a job should rank high under a measure that finds the heads doing the heavy lifting).

    ``predict(gates) -> pred tokens`` and ``translate_fn(src, gates) -> token lists`` default to
    :func:`teacher_forced_predictions` and :func:`minihead.translate.translate` of the model (tests replace them).
    Returns ``{"needs", "count": {need: marked reference tokens}, "base": {need: accuracy, "bleu"}, "single":
    [[{need: drop, "bleu": drop}] * H] * L, "survivors": [needs no single ablation breaks], "pairs": [{"layer",
    "heads", need: drop, "bleu": drop}]}`` (pairs empty when no need survives or a layer has one head)."""
    marks = [need_marks(t, lex) for t in trees]
    _check_lengths(tgt_sents, marks, "reference")
    predict = predict or (lambda gates: teacher_forced_predictions(params, cfg, vocab, src_sents, tgt_sents,
                                                                   gates=gates))
    translate_fn = translate_fn or (lambda src, gates: translate(params, cfg, vocab, src, gates=gates))
    src_b, ref_b = src_sents[:n_bleu], tgt_sents[:n_bleu]

    def scores(gates):
        tf = teacher_forced_scores(predict(gates), marks)
        return {**{n: tf[n]["accuracy"] for n in NEEDS}, "bleu": float(bleu(translate_fn(src_b, gates), ref_b))}

    def drop(base, now):
        return {n: (None if base[n] is None or now[n] is None else base[n] - now[n]) for n in (*NEEDS, "bleu")}

    base = scores(None)
    L, H = cfg.n_layers("enc"), cfg.n_heads
    single = [[drop(base, scores(encoder_gates(cfg, [(l, h)]))) for h in range(H)] for l in range(L)]
    survivors = [n for n in NEEDS if base[n] is not None
                 and all(cell[n] < survives for row in single for cell in row)]
    pairs = []
    if survivors:
        for l in range(L):
            for a, b in itertools.combinations(range(H), 2):
                pairs.append({"layer": l, "heads": [a, b], **drop(base, scores(encoder_gates(cfg, [(l, a), (l, b)])))})
    count = {n: sum(n in m for ms in marks for m in ms) for n in NEEDS}
    return {"needs": list(NEEDS), "count": count, "base": base, "single": single, "survivors": survivors,
            "pairs": pairs, "n_bleu": min(n_bleu, len(src_sents)), "survives": survives}


def doers(matrix, need, at_least=SURVIVES):
    """The encoder heads ("L{l}H{h}") whose single ablation costs ``need`` at least ``at_least`` of its accuracy,
    largest drop first: the heads the matrix says do that job."""
    cells = [(cell[need], f"L{l}H{h}") for l, row in enumerate(matrix["single"]) for h, cell in enumerate(row)
             if cell[need] is not None and cell[need] >= at_least]
    return [name for _, name in sorted(cells, key=lambda c: -c[0])]


def carriers(matrix, share=0.8):
    """The fewest encoder heads that together carry ``share`` of all need damage: heads in decreasing order of
    :func:`markers_lost` (only heads whose removal loses markers) until their sum reaches ``share`` of the total.
    Returns [(head name, markers lost)]; empty when no single removal loses any marker."""
    lost = sorted(((x, f"L{l}H{h}") for l, row in enumerate(markers_lost(matrix)) for h, x in enumerate(row) if x > 0),
                  key=lambda c: (-c[0], c[1]))   # ties in head order
    total, out, acc = sum(x for x, _ in lost), [], 0.0
    for x, name in lost:
        if total == 0 or acc >= share * total:
            break
        out.append((name, x))
        acc += x
    return out


def carriers_kept(matrix, retained, share=0.8):
    """Pruning judged by the matrix: how many of the :func:`carriers` survive a pruned model's encoder mask
    ``retained`` ((L, H) of bools), and how unlikely that many would be if the survivors were drawn at random,
    the hypergeometric tail P(X >= kept) with X the carriers among n survivors drawn from N heads:
    sum_{i >= kept} C(K, i) C(N - K, n - i) / C(N, n). Returns {"carriers", "survivors", "kept", "p", "n_heads"
    (N)}."""
    names = [c for c, _ in carriers(matrix, share)]
    mask = to_host(retained).astype(bool).tolist() if hasattr(retained, "shape") else retained
    survivors = [f"L{l}H{h}" for l, row in enumerate(mask) for h, k in enumerate(row) if k]
    N, K, n = sum(map(len, mask)), len(names), len(survivors)
    kept = len(set(names) & set(survivors))
    p = sum(math.comb(K, i) * math.comb(N - K, n - i) for i in range(kept, min(K, n) + 1)) / math.comb(N, n)
    return {"carriers": names, "survivors": survivors, "kept": kept, "p": p, "n_heads": N}


def carriers_kept_pooled(kepts):
    """Pruning judged by the matrix over seeds: the carriers kept in every seed together, and how unlikely that
    many would be if each seed's survivors were drawn at random, P(X_1 + ... + X_k >= kept_1 + ... + kept_k) with
    the X_i independent and hypergeometric as in :func:`carriers_kept` (exact: their distributions convolved).
    ``kepts``: :func:`carriers_kept` results, one per seed (or pruned run). Returns {"kept", "carriers", "p",
    "n"}; p None without a seed that has carriers."""
    dist = [1.0]                                  # P(sum = i) over the seeds so far
    kept = total = 0
    for k in kepts:
        N, K, n = k["n_heads"], len(k["carriers"]), len(k["survivors"])
        pmf = [math.comb(K, i) * math.comb(N - K, n - i) / math.comb(N, n) for i in range(min(K, n) + 1)]
        dist = [sum(dist[j] * pmf[i - j] for j in range(len(dist)) if 0 <= i - j < len(pmf))
                for i in range(len(dist) + len(pmf) - 1)]
        kept, total = kept + k["kept"], total + K
    p = sum(dist[kept:]) if total else None
    return {"kept": kept, "carriers": total, "p": None if p is None else min(p, 1.0), "n": len(kepts)}


# --------------------------------------------------------------------------- the instruments judged by the matrix
# instrument -> the key of its per-head scores in an importance stage (minihead.stages.importance_stage)
INSTRUMENTS = {"LRP relevance, z-rule, magnitude shares (sec. 4)": "relevance_abs",
               "LRP relevance, z-rule, signed shares": "relevance",
               "LRP relevance, the official code's variant": "relevance_official",
               "confidence (sec. 4)": "confidence",
               "Michel importance (gradient of the loss at the gate)": "michel",
               "BLEU drop with the head switched off alone (dev)": "ablation"}


def markers_lost(matrix):
    """(L, H) nested lists: how many marked test tokens go wrong when each encoder head is switched off alone,
    summed over the needs, sum_need drop[l, h, need] x count[need]. The work the matrix says a head does, in
    tokens, so a head that breaks a frequent need outweighs one that breaks a rare one."""
    return [[sum((cell[n] or 0.0) * matrix["count"][n] for n in matrix["needs"]) for cell in row]
            for row in matrix["single"]]


def instrument_agreement(per_seed):
    """Does each importance measure rank the encoder heads as the matrix does? ``per_seed``: [(matrix,
    instruments)], ``instruments`` a dict of per-head scores {key: {"enc": (L, H)}} as an importance stage holds
    them. Per seed, Spearman's rho of the instrument's scores against :func:`markers_lost` over every encoder
    head; pooled over seeds by Fisher z (:func:`minihead.findings.pool_rho`, one-sided), and the instrument
    "agrees" when the pooled p < :data:`minihead.findings.ALPHA`. Returns {instrument name: {"key", "rho": [per
    seed], "pooled": {"rho", "p", "seeds"}, "agrees": bool}} for the instruments every seed measured."""
    out = {}
    for name, key in INSTRUMENTS.items():
        if not all(key in inst for _, inst in per_seed):
            continue
        rhos = [rank_agreement(markers_lost(m), inst[key]["enc"]) for m, inst in per_seed]
        ns = [sum(map(len, m["single"])) for m, _ in per_seed]
        pooled = findings.pool_rho(rhos, ns)
        out[name] = {"key": key, "rho": rhos, "pooled": pooled,
                     "agrees": pooled["p"] is not None and pooled["p"] < findings.ALPHA}
    return out


def study_agreement(per_seed):
    """:func:`instrument_agreement` of a head x need study's seeds (:func:`minihead.study.needs_doc`'s
    ``per_seed``: each {"matrix", "instruments": {key: (L, H) encoder scores}})."""
    return instrument_agreement([(p["matrix"], {k: {"enc": v} for k, v in p["instruments"].items()})
                                 for p in per_seed])
