"""Byte-pair encoding (Sennrich, Haddow & Birch 2016, "Neural Machine Translation of Rare Words with
Subword Units", Algorithm 1) and a small tokenizer for raw real text.

Conventions follow subword-nmt (github.com/rsennrich/subword-nmt, learn_bpe.py / apply_bpe.py):
a word starts as its characters with the end-of-word marker glued to the last one
(``low`` -> ``l o w</w>``); each step merges the most frequent adjacent pair, ties broken by the
larger pair (``max`` over ``(count, pair)``); learning stops early when the best pair occurs fewer
than ``min_frequency`` times. Segmentation drops ``</w>`` and marks every non-final piece of a
word with ``@@`` (``lowest`` -> ``low@@ est``).
"""
import collections
import heapq
import pathlib
import re
from collections.abc import Mapping

from ..errors import DataError
from .corpus import read_lines

EOW = "</w>"
CONT = "@@"
HEADER = "#version: 0.2"


def _rev(s):
    """Integer key that orders strings in reverse, so a min-heap pops the lexicographically
    largest pair first among equal counts (subword-nmt's tie-break)."""
    return tuple(-ord(c) for c in s) + (1,)


def _pairs(word):
    return zip(word, word[1:])


def _merge_word(word, a, b):
    """Replace every non-overlapping occurrence of (a, b) in ``word``, left to right."""
    out, i, n = [], 0, len(word)
    while i < n:
        if i < n - 1 and word[i] == a and word[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def piece_to_word(pieces):
    """Word index of every piece: a piece ending in "@@" continues into the next one."""
    out, w = [], 0
    for p in pieces:
        out.append(w)
        if not p.endswith(CONT):
            w += 1
    return out


def unsegment(pieces):
    """Tokens from pieces: glue each "@@"-marked piece to the next (inverse of ``segment``)."""
    out, cur = [], ""
    for p in pieces:
        if p.endswith(CONT):
            cur += p[:-len(CONT)]
        else:
            out.append(cur + p)
            cur = ""
    if cur:
        out.append(cur)  # a dangling "@@" piece at the end still yields its word
    return out


class BPE:
    """Learned merge list; ``merges[k]`` is the k-th merged pair (lower k = applied first)."""

    piece_to_word = staticmethod(piece_to_word)
    unsegment = staticmethod(unsegment)

    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.ranks = {m: k for k, m in enumerate(self.merges)}
        self._cache = {}

    @classmethod
    def learn(cls, data, n_merges, min_frequency=2):
        """Learn up to ``n_merges`` merges from a ``{word: count}`` mapping or from sentences
        (an iterable of token lists or whitespace-separated strings).

        Pair counts are updated incrementally: a merge revisits only the words that contain the
        merged pair (subtracting their old pairs, adding their new ones), and a heap with lazy
        deletion finds the next best pair, so a merge costs about the size of its words.
        """
        if isinstance(data, Mapping):
            counts = collections.Counter({w: int(c) for w, c in data.items()})
        else:
            counts = collections.Counter()
            for sent in data:
                counts.update(sent.split() if isinstance(sent, str) else sent)
        words = [tuple(w[:-1]) + (w[-1] + EOW,) for w in sorted(counts) if w]
        freqs = [counts[w] for w in sorted(counts) if w]
        stats = collections.Counter()                 # pair -> weighted count
        where = collections.defaultdict(set)           # pair -> indices of words containing it
        for j, (word, f) in enumerate(zip(words, freqs)):
            for p in _pairs(word):
                stats[p] += f
                where[p].add(j)
        heap = [(-c, _rev(p[0]), _rev(p[1]), p) for p, c in stats.items()]
        heapq.heapify(heap)
        merges = []
        while len(merges) < n_merges and heap:
            negc, _, _, pair = heapq.heappop(heap)
            if stats.get(pair, 0) != -negc:
                continue  # stale entry: the count changed after it was pushed
            if -negc < min_frequency:
                break
            merges.append(pair)
            a, b = pair
            touched = set()
            for j in sorted(where.pop(pair, ())):
                old, f = words[j], freqs[j]
                new = _merge_word(old, a, b)
                if new == old:
                    continue
                for p in _pairs(old):
                    stats[p] -= f
                    touched.add(p)
                for p in _pairs(new):
                    stats[p] += f
                    where[p].add(j)
                    touched.add(p)
                words[j] = new
            stats.pop(pair, None)
            for p in touched:
                c = stats.get(p, 0)
                if c > 0:
                    heapq.heappush(heap, (-c, _rev(p[0]), _rev(p[1]), p))
                elif p in stats:
                    del stats[p]
        return cls(merges)

    def _segment_word(self, word):
        """Apply merges to one word, lowest rank first (as subword-nmt's ``encode``)."""
        if word in self._cache:
            return self._cache[word]
        sym = tuple(word[:-1]) + (word[-1] + EOW,)
        while len(sym) > 1:
            ranked = [(self.ranks[p], p) for p in _pairs(sym) if p in self.ranks]
            if not ranked:
                break
            sym = _merge_word(sym, *min(ranked)[1])
        last = sym[-1][:-len(EOW)]
        pieces = [s + CONT for s in sym[:-1]] + ([last] if last else [])
        if not last:  # the marker stood alone: the previous piece is final
            pieces[-1] = pieces[-1][:-len(CONT)]
        self._cache[word] = pieces
        return pieces

    def segment(self, tokens):
        """Subword pieces of a token list; non-final pieces of a word end in "@@"."""
        out = []
        for t in tokens:
            if t:
                out.extend(self._segment_word(t))
        return out

    def save(self, path):
        """Plain text: a version header, then one merge ``a b`` per line."""
        lines = [HEADER] + [f"{a} {b}" for a, b in self.merges]
        pathlib.Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path):
        """Read a file written by :meth:`save` (or by subword-nmt's learn_bpe); a missing, unreadable or
        non-UTF-8 file or a malformed line raises DataError naming the file (and line)."""
        merges = []
        for lineno, line in enumerate(read_lines(path), start=1):
            if lineno == 1 and line.startswith("#version"):
                continue
            parts = line.split(" ")
            if len(parts) != 2 or not all(parts):
                raise DataError(f"{path}:{lineno}: expected a merge 'a b', got {line!r}")
            merges.append(tuple(parts))
        return cls(merges)


# Numbers with decimal points / commas, words with inner hyphens, clitics ('s, 't), single symbols.
_TOKEN = re.compile(r"\d+(?:[.,]\d+)+|\w+(?:-\w+)*|'\w+|[^\w\s]")
_NO_SPACE_BEFORE = re.compile(r" ([.,!?;:%)\]}]|'\w+)")
_NO_SPACE_AFTER = re.compile(r"([(\[{]) ")


def tokenize(line, lower=False):
    """Split a raw line into words and punctuation ("a woman's hat." -> a woman 's hat .)."""
    if lower:
        line = line.lower()
    return _TOKEN.findall(line)


def detokenize(tokens):
    """Join tokens back into text, removing spaces before closing punctuation and clitics and
    after opening brackets (the approximate inverse of :func:`tokenize`)."""
    text = " ".join(tokens)
    text = _NO_SPACE_BEFORE.sub(r"\1", text)
    return _NO_SPACE_AFTER.sub(r"\1", text)
