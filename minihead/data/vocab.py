"""Token <-> id vocabulary and length-bucketed batching.

One joint vocabulary over source and target is the default (the model ties its embeddings);
side-specific frequencies for the rare-word analysis come from :func:`frequencies`.
"""
import collections
from dataclasses import dataclass

from ..backend import to_host, xp
from ..errors import DataError

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


def frequencies(sentences):
    """Counter of token frequencies over a list of token lists (e.g. the training sources)."""
    counts = collections.Counter()
    for toks in sentences:
        counts.update(toks)
    return counts


class Vocab:
    """Specials first (ids 0-3), then tokens by descending count, ties broken by the string."""

    def __init__(self, itos, counts):
        if tuple(itos[:len(SPECIALS)]) != SPECIALS:
            raise DataError(f"vocabulary must start with {' '.join(SPECIALS)}, got {itos[:4]}")
        if len(counts) != len(itos):
            raise DataError(f"vocabulary has {len(itos)} tokens but {len(counts)} counts")
        self.itos = list(itos)
        self.counts = [int(c) for c in counts]
        self.stoi = {tok: i for i, tok in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            dup = collections.Counter(self.itos).most_common(1)[0][0]
            raise DataError(f"vocabulary lists {dup!r} twice")
        # what text maps to: the words only, so a literal "<pad>" or "<eos>" in a sentence is an unknown word
        self._word_ids = {tok: i for tok, i in self.stoi.items() if i >= len(SPECIALS)}

    @classmethod
    def build(cls, sentences, min_freq=1, max_size=None):
        """Vocabulary of a list of token lists. ``max_size`` caps the non-special tokens kept;
        tokens seen fewer than ``min_freq`` times map to <unk>."""
        counts = frequencies(sentences)
        for s in SPECIALS:
            counts.pop(s, None)  # a literal "<unk>" in the text is not a second special
        kept = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            kept = kept[:max_size]
        return cls(list(SPECIALS) + kept, [0] * len(SPECIALS) + [counts[t] for t in kept])

    def __len__(self):
        return len(self.itos)

    def encode(self, tokens):
        """Ids of tokens; unknown tokens -> UNK, and so is text spelling a special ("<pad>", "<eos>", ...):
        special ids come only from the model's own framing (BOS, EOS, PAD), never from the text."""
        return [self._word_ids.get(t, UNK) for t in tokens]

    def decode(self, ids):
        """Tokens of ids up to the first EOS, PAD and BOS dropped."""
        if hasattr(ids, "shape"):
            ids = to_host(ids).tolist()
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i in (PAD, BOS):
                continue
            out.append(self.itos[i])
        return out

    def rank(self, token):
        """Frequency rank among non-special tokens (0 = most frequent); unknown tokens rank after
        every known one."""
        i = self.stoi.get(token)
        if i is None or i < len(SPECIALS):
            return len(self.itos) - len(SPECIALS)
        return i - len(SPECIALS)

    def to_arrays(self):
        """Plain lists for a checkpoint writer (no pickle): ``{"itos": [str], "counts": [int]}``."""
        return {"itos": list(self.itos), "counts": list(self.counts)}

    @classmethod
    def from_arrays(cls, itos, counts):
        """Inverse of :meth:`to_arrays`; accepts lists or 1-D arrays."""
        itos = [str(t) for t in (to_host(itos).tolist() if hasattr(itos, "shape") else itos)]
        counts = [int(c) for c in (to_host(counts).tolist() if hasattr(counts, "shape") else counts)]
        return cls(itos, counts)


@dataclass
class Batch:
    """One padded batch. Source rows are x + [EOS]; target rows BOS + y (input) and y + EOS (output)."""
    src: object       # (B, S) int64 token ids, PAD = 0
    src_mask: object  # (B, S) bool, True = real token
    tgt_in: object    # (B, T) int64, BOS + y
    tgt_out: object   # (B, T) int64, y + EOS
    tgt_mask: object  # (B, T) bool, True = real target position
    n_tokens: int     # number of real target tokens (loss normaliser)
    index: list       # dataset position of each row, to restore corpus order


def _pad(rows, width):
    return [r + [PAD] * (width - len(r)) for r in rows]


def make_batch(src_ids, tgt_ids, index):
    """Batch of the pairs at ``index`` (lists of ids without specials)."""
    src_rows = [list(src_ids[i]) + [EOS] for i in index]
    tin_rows = [[BOS] + list(tgt_ids[i]) for i in index]
    tout_rows = [list(tgt_ids[i]) + [EOS] for i in index]
    S = max(len(r) for r in src_rows)
    T = max(len(r) for r in tout_rows)
    src = xp.asarray(_pad(src_rows, S), dtype="int64")       # (B, S)
    tgt_in = xp.asarray(_pad(tin_rows, T), dtype="int64")    # (B, T)
    tgt_out = xp.asarray(_pad(tout_rows, T), dtype="int64")  # (B, T)
    lengths = xp.asarray([len(r) for r in tout_rows], dtype="int64")  # (B,)
    tgt_mask = xp.arange(T)[None, :] < lengths[:, None]                 # (B, T)
    return Batch(src=src, src_mask=src != PAD, tgt_in=tgt_in, tgt_out=tgt_out, tgt_mask=tgt_mask,
                 n_tokens=int(lengths.sum()), index=list(index))


def batches(src_ids, tgt_ids, max_tokens, shuffle_rng=None):
    """Yield Batches of at most ``max_tokens`` padded tokens, counting B * (S + T) with S, T the
    padded source and target lengths (EOS / BOS included).

    Pairs are sorted by (source length, target length, position), so padding is small and the cut
    is deterministic; a single pair larger than the budget forms a batch of its own. With a
    ``shuffle_rng`` (a seeded ``numpy.random.Generator`` from :func:`minihead.backend.rng`) the
    batch order is permuted; the contents of each batch do not change.
    """
    if len(src_ids) != len(tgt_ids):
        raise DataError(f"{len(src_ids)} source sequences but {len(tgt_ids)} target sequences")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    order = sorted(range(len(src_ids)), key=lambda i: (len(src_ids[i]), len(tgt_ids[i]), i))
    groups, cur, S, T = [], [], 0, 0
    for i in order:
        s, t = len(src_ids[i]) + 1, len(tgt_ids[i]) + 1
        S2, T2 = max(S, s), max(T, t)
        if cur and (len(cur) + 1) * (S2 + T2) > max_tokens:
            groups.append(cur)
            cur, S2, T2 = [], s, t
        cur.append(i)
        S, T = S2, T2
    if cur:
        groups.append(cur)
    if shuffle_rng is not None:
        groups = [groups[int(k)] for k in shuffle_rng.permutation(len(groups))]
    for g in groups:
        yield make_batch(src_ids, tgt_ids, g)
