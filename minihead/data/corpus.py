"""Parallel text loading with file-and-line error messages, and the shipped data_small set."""
import os
import pathlib

from ..errors import DataError, UsageError
from .conllu_io import check_tokens_match, read_conllu

SPLITS = ("train", "dev", "test")
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def read_lines(path):
    """Lines of a UTF-8 text file without line ends (a leading byte-order mark dropped); invalid UTF-8 is
    reported with its line."""
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    if text.startswith("\ufeff"):
        text = text[1:]   # a byte-order mark is not part of the first token
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line does not start another
    return [ln.rstrip("\r") for ln in lines]


def read_sentences(path, tokenize=None):
    """Token lists of a one-sentence-a-line source file (the ``translate --input`` rule): an empty line is
    refused with its file and line, as :func:`read_parallel` refuses one, and so is a file without lines."""
    split = tokenize or str.split
    out = []
    for k, line in enumerate(read_lines(path), start=1):
        toks = split(line)
        if not toks:
            raise DataError(f"{path}:{k}: empty line (every line must hold a sentence)")
        out.append(toks)
    if not out:
        raise DataError(f"{path}: no sentences (the file is empty)")
    return out


def read_parallel(src_path, tgt_path, tokenize=None):
    """Aligned (source tokens, target tokens) pairs, line i of one file with line i of the other.

    ``tokenize``: a function line -> tokens (e.g. :func:`minihead.data.bpe.tokenize`); default
    whitespace split. Raises DataError for different line counts (both counts given), an empty
    line on either side (file and line named) or invalid UTF-8.
    """
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
                        f"parallel files must have one line per sentence pair")
    split = tokenize or str.split
    pairs = []
    for k, (s, t) in enumerate(zip(src, tgt), start=1):
        s_tok, t_tok = split(s), split(t)
        for path, toks, other in ((src_path, s_tok, tgt_path), (tgt_path, t_tok, src_path)):
            if not toks:
                raise DataError(f"{path}:{k}: empty line (its pair is line {k} of {other})")
        pairs.append((s_tok, t_tok))
    return pairs


def resolve_data(root):
    """A relative data folder that does not exist from the working directory is taken from the repository
    root, so notebooks running in chapters/ and every command run from elsewhere find data_small too."""
    root = pathlib.Path(root)
    if not root.is_absolute() and not root.exists() and (REPO_ROOT / root).exists():
        return REPO_ROOT / root
    return root


def load_data_small(root="data_small"):
    """The shipped synthetic set: ``(splits, trees)`` with ``splits[name] = (src token lists,
    tgt token lists)`` for train / dev / test and ``trees[name]`` the gold
    :class:`~minihead.data.conllu_io.Sentence` list of dev / test, checked against the text."""
    root = resolve_data(root)
    if not (root / "train.src").exists():
        raise DataError(f"{root}: no train.src here; generate the data with "
                        f"`python -m minihead.data.synth --out {root}`")
    splits, trees = {}, {}
    for name in SPLITS:
        pairs = read_parallel(root / f"{name}.src", root / f"{name}.tgt")
        splits[name] = ([s for s, _ in pairs], [t for _, t in pairs])
    for name in ("dev", "test"):
        trees[name] = read_conllu(root / f"{name}.conllu")
        check_tokens_match(trees[name], splits[name][0], root / f"{name}.conllu", root / f"{name}.src")
    return splits, trees


def read_split(data, split):
    """The sentence pairs of ``<data>/<split>.src`` / ``.tgt`` (:func:`read_parallel`: a malformed line is an error
    naming file and line); an empty split is a UsageError naming the source file."""
    src, tgt = os.path.join(str(data), f"{split}.src"), os.path.join(str(data), f"{split}.tgt")
    pairs = read_parallel(src, tgt)
    if not pairs:
        raise UsageError(f"{src}: no sentence pairs ({split} split is empty)")
    return pairs
