"""Read, validate and write CoNLL-U dependency trees (Universal Dependencies v2 format).

Parsing is done by the ``conllu`` package (``conllu.parse_incr``); this module adds the checks a
tree must pass before head analysis trusts it, and reports each failure as ``path:line: problem``.
Format reference: https://universaldependencies.org/format.html (ten tab-separated columns
ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC; multiword-token lines ``3-4`` and empty nodes
``8.1`` carry no basic-tree HEAD and are skipped).
"""
import io
import pathlib
from dataclasses import dataclass, field

import conllu
from conllu.exceptions import ParseException
from conllu.parser import DEFAULT_FIELD_PARSERS, DEFAULT_FIELDS, parse_line

from ..errors import DataError


@dataclass
class Sentence:
    """One dependency tree. Word ``i`` (0-based) is ``tokens[i]``; ``heads[i]`` is the 1-based id
    of its head (0 = root), as in the CoNLL-U HEAD column."""
    tokens: list[str]
    heads: list[int]
    deprels: list[str]
    upos: list[str]
    line_numbers: list[int] = field(default_factory=list)  # source line of each word, for errors
    lemmas: list[str] | None = None                         # optional LEMMA column
    feats: list[str] | None = None                          # optional FEATS column, "_" when empty
    meta: dict = field(default_factory=dict)                # comment lines (sent_id, text)

    def __len__(self):
        return len(self.tokens)

    def rel(self, i):
        """Base relation of word i: the part of DEPREL before ":" (``nsubj:pass`` -> ``nsubj``).
        UD v2 ``obj`` is the paper's ``dobj``."""
        return self.deprels[i].split(":", 1)[0]

    def head_index(self, i):
        """0-based index of word i's head, or -1 for the root."""
        return self.heads[i] - 1

    def arcs(self, rel):
        """(dependent, head) 0-based index pairs of every arc whose base relation is ``rel``."""
        return [(i, self.heads[i] - 1) for i in range(len(self.tokens))
                if self.heads[i] > 0 and self.rel(i) == rel]


def _decode(path):
    """File text as str, without a leading byte-order mark; invalid UTF-8 is reported with its line number."""
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    return text[1:] if text.startswith("\ufeff") else text   # a UTF-8 byte-order mark is no part of line 1


def _blocks(text):
    """Line numbers of the non-comment lines of each sentence block, split exactly as
    ``conllu.parser.parse_sentences`` splits (blank lines separate sentences)."""
    blocks, cur, first = [], [], None
    for lineno, line in enumerate(io.StringIO(text), start=1):
        if line.strip() == "":
            if first is not None:
                blocks.append((first, cur))
            cur, first = [], None
            continue
        if first is None:
            first = lineno
        if not line.strip().startswith("#"):
            cur.append((lineno, line.strip()))
    if first is not None:
        blocks.append((first, cur))
    return blocks


def _first_bad_line(path, lines, exc):
    """Re-parse a failing block line by line to name the line the conllu package rejected."""
    for lineno, line in lines:
        try:
            parse_line(line, DEFAULT_FIELDS, dict(DEFAULT_FIELD_PARSERS))
        except ParseException as line_exc:
            return DataError(f"{path}:{lineno}: sentence does not parse: {line_exc}")
    return DataError(f"{path}:{lines[0][0] if lines else '?'}: sentence does not parse: {exc}")


def _validate(path, first_line, words, lines):
    """Build a Sentence from the parsed word tokens, checking ids, heads, one root and no cycle."""
    n = len(words)
    if n == 0:
        raise DataError(f"{path}:{first_line}: sentence has no word lines")
    tokens, heads, deprels, upos, lemmas, feats = [], [], [], [], [], []
    for k, (tok, lineno) in enumerate(zip(words, lines), start=1):
        if len(tok) < len(DEFAULT_FIELDS):
            raise DataError(f"{path}:{lineno}: expected 10 tab-separated columns, found {len(tok)}")
        if not tok["form"]:
            raise DataError(f"{path}:{lineno}: FORM is empty")
        if tok["id"] is None:
            raise DataError(f"{path}:{lineno}: ID is '_' (word ids must be integers)")
        if tok["id"] != k:
            raise DataError(f"{path}:{lineno}: word id {tok['id']} where {k} was expected "
                            f"(ids must be consecutive from 1)")
        head = tok["head"]
        if not isinstance(head, int):
            raise DataError(f"{path}:{lineno}: HEAD {head if head is not None else '_'!s} is not an integer")
        if not 0 <= head <= n:
            raise DataError(f"{path}:{lineno}: HEAD {head} out of range 0..{n}")
        if tok["deprel"] is None:
            raise DataError(f"{path}:{lineno}: DEPREL is missing ('_')")
        tokens.append(tok["form"])
        heads.append(head)
        deprels.append(tok["deprel"])
        upos.append(tok["upos"] or "_")
        lemmas.append(tok["lemma"] or "_")
        feats.append(conllu.serializer.serialize_field(tok["feats"]))
    roots = [k for k in range(n) if heads[k] == 0]
    if not roots:
        raise DataError(f"{path}:{lines[0]}: no root (no word has HEAD 0)")
    if len(roots) > 1:
        raise DataError(f"{path}:{lines[roots[1]]}: several roots: words "
                        f"{', '.join(str(r + 1) for r in roots)} have HEAD 0")
    for start in range(n):
        # Walk up from every word; a tree reaches the root within n steps without revisiting.
        seen, k = [], start
        while heads[k] != 0:
            if k in seen:
                cyc = seen[seen.index(k):] + [k]
                raise DataError(f"{path}:{lines[k]}: cycle in HEAD: "
                                f"{' -> '.join(str(c + 1) for c in cyc)}")
            seen.append(k)
            k = heads[k] - 1
    return Sentence(tokens, heads, deprels, upos, list(lines), lemmas, feats)


def read_conllu(path):
    """All sentences of a CoNLL-U file as validated :class:`Sentence` objects.

    Multiword-token lines (``3-4``) and empty nodes (``8.1``) are skipped; a leading byte-order mark is
    dropped. Raises DataError ``path:line: problem`` for a line with more than 10 columns, a line the
    ``conllu`` package cannot parse, an empty FORM, non-consecutive ids,
    a HEAD that is not an integer or out of range, zero or several roots, or a cycle.
    """
    text = _decode(path)
    for lineno, line in enumerate(io.StringIO(text), start=1):
        line = line.rstrip("\r\n")
        if line.strip() and not line.lstrip().startswith("#") and line.count("\t") > 9:
            raise DataError(f"{path}:{lineno}: expected 10 tab-separated columns, found {line.count(chr(9)) + 1}")
    blocks = _blocks(text)
    out = []
    parsed = conllu.parse_incr(io.StringIO(text))
    for first_line, lines in blocks:
        try:
            tl = next(parsed)
        except ParseException as exc:
            raise _first_bad_line(path, lines, exc) from None
        # Keep word lines only; their line numbers follow the same filter.
        keep = [(tok, ln) for tok, (ln, _) in zip(tl, lines) if isinstance(tok["id"], int)
                or tok["id"] is None]
        sent = _validate(path, first_line, [t for t, _ in keep], [ln for _, ln in keep])
        sent.meta = dict(tl.metadata)
        out.append(sent)
    return out


def write_conllu(path, sentences):
    """Write sentences as CoNLL-U (serialised by ``conllu.models.TokenList``); LEMMA and FEATS are
    written when the Sentence has them, XPOS/DEPS/MISC as ``_``."""
    chunks = []
    for s in sentences:
        words = []
        for i, form in enumerate(s.tokens):
            feats = s.feats[i] if s.feats is not None else "_"
            words.append({"id": i + 1, "form": form,
                          "lemma": s.lemmas[i] if s.lemmas is not None else "_",
                          "upos": s.upos[i], "xpos": None,
                          "feats": None if feats in ("_", "") else feats,
                          "head": s.heads[i], "deprel": s.deprels[i], "deps": None, "misc": None})
        chunks.append(conllu.models.TokenList(words, conllu.models.Metadata(s.meta)).serialize())
    pathlib.Path(path).write_text("".join(chunks), encoding="utf-8")


def check_tokens_match(sentences, token_lines, conllu_path, text_path):
    """Raise DataError unless line i of the text has exactly the words of tree i.

    ``token_lines``: one token list (or whitespace-separated string) per line of ``text_path``.
    The message names both files, the line / sentence number and the first mismatching token.
    """
    if len(sentences) != len(token_lines):
        raise DataError(f"{text_path} has {len(token_lines)} lines but {conllu_path} has "
                        f"{len(sentences)} sentences")
    for i, (sent, toks) in enumerate(zip(sentences, token_lines)):
        toks = toks.split() if isinstance(toks, str) else list(toks)
        if toks == sent.tokens:
            continue
        j = next((j for j, (a, b) in enumerate(zip(toks, sent.tokens)) if a != b),
                 min(len(toks), len(sent.tokens)))
        where = sent.line_numbers[min(j, len(sent) - 1)] if sent.line_numbers else "?"
        text_tok = repr(toks[j]) if j < len(toks) else "end of line"
        tree_tok = repr(sent.tokens[j]) if j < len(sent) else "end of sentence"
        raise DataError(f"{text_path}:{i + 1}: does not match sentence {i + 1} of {conllu_path} "
                        f"(line {where}): token {j + 1} is {text_tok} in the text but "
                        f"{tree_tok} in the tree")
