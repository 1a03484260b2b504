"""Data layer: the synthetic language pair, CoNLL-U trees, vocabulary and batching, BPE, loaders."""
from .bpe import BPE, detokenize, piece_to_word, tokenize, unsegment
from .conllu_io import Sentence, check_tokens_match, read_conllu, write_conllu
from .corpus import load_data_small, read_lines, read_parallel
from .vocab import BOS, EOS, PAD, SPECIALS, UNK, Batch, Vocab, batches, frequencies, make_batch

__all__ = ["BPE", "detokenize", "piece_to_word", "tokenize", "unsegment", "Sentence",
           "check_tokens_match", "read_conllu", "write_conllu", "load_data_small", "read_lines",
           "read_parallel", "BOS", "EOS", "PAD", "SPECIALS", "UNK", "Batch", "Vocab", "batches",
           "frequencies", "make_batch"]
