"""BLEU and chrF with sacrebleu (Post 2018) on detokenized text, with the signatures printed.

Our models emit tokens; they are joined back into text (``detok``; for BPE output, pieces are merged
first) and scored with sacrebleu's own tokenization, so numbers are comparable across tokenizers."""
import sacrebleu

from .data.bpe import detokenize, unsegment


def text(tokens):
    """Model tokens -> text: BPE pieces ("wor@@ d") are merged first (a no-op on word tokens), then
    the words are detokenized (no space before closing punctuation)."""
    return detokenize(unsegment(tokens))


def _text(tokens, detok):
    return (detok or text)(tokens)


def score(hyp_token_lists, ref_token_lists, detok=None):
    """Corpus BLEU and chrF: dict with ``bleu``, ``chrf`` and their sacrebleu signatures.

    ``detok`` turns a token list into text (default :func:`text`: merge BPE pieces, detokenize)."""
    if len(hyp_token_lists) != len(ref_token_lists):
        raise ValueError(f"{len(hyp_token_lists)} hypotheses but {len(ref_token_lists)} references")
    hyps = [_text(h, detok) for h in hyp_token_lists]
    refs = [[_text(r, detok) for r in ref_token_lists]]
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    b, c = bleu.corpus_score(hyps, refs), chrf.corpus_score(hyps, refs)
    return {"bleu": b.score, "chrf": c.score, "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature())}


def bleu(hyp_token_lists, ref_token_lists, detok=None):
    """Corpus BLEU of token lists (a float in 0..100)."""
    return score(hyp_token_lists, ref_token_lists, detok)["bleu"]
