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
import random

from . import model
from .backend import to_host
from .data import synth
from .data.vocab import batches
from .errors import DataError
from .translate import translate

NEEDS = ("sandhi", "nsubj", "obj", "advmod", "amod")
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
