"""The paper's numbers, transcribed as data for the report's "paper" column.

Source: Voita, Talbot, Moiseev, Sennrich, Titov (ACL 2019), "Analyzing Multi-Head Self-Attention:
Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned", arXiv 1905.09418, as summarised in
``shared/paper/voita2019.md`` of this project. Numbers marked approximate there come from secondary
sources; ``APPROX`` lists them.
"""
SOURCE = "Voita et al. 2019 (ACL), arXiv 1905.09418; transcribed from shared/paper/voita2019.md"

SETTING = {"layers": 6, "heads": 8, "encoder_heads": 48, "bpe": 32000,
           "baseline_bleu": {"WMT EN-RU": 29.6, "OpenSubtitles EN-RU": 32.4}}

POSITIONAL = {"threshold": 0.9, "min_confidence": 0.8}   # sec. 5.1: >= 90% on one offset; observed confidence > 0.8
FEW_HEADS_MARGIN = 0.10   # sec. 4 "only a few heads": the top quarter holds >= 10 points more than if all were equal
SYNTACTIC_MARGIN = 0.10   # sec. 5.2: a syntactic head beats the most-frequent-offset baseline by >= 10 points
FEW_HEADS_MIN_HEADS = 4   # "a few of a layer's heads" is testable only with >= 4 heads (the top quarter then < half)
RARE_SHARE = 0.5          # sec. 5.3: a first-layer head on the rarest token at least half of the time (the paper's: 66%)
ALPHA = 0.05              # a correlation or difference claimed over seeds needs a pooled one-sided p below this
PRUNE_BLEU_TOLERANCE = 1.0  # sec. 6.2 "at a small cost" (-0.15 BLEU for 10 of 48 on WMT): read as within 1 BLEU
PRUNE_KEEP_SHARE = 1 / 3  # sec. 6.2 "most encoder heads can be pruned" (10 of 48 kept): at most a third kept

# Table 1, EN-RU: best head / best fixed-offset baseline, in %
TABLE1 = {
    ("nsubj", "head->dep"): {"WMT": (45, 35), "OpenSubtitles": (77, 45)},
    ("nsubj", "dep->head"): {"WMT": (52, 35), "OpenSubtitles": (70, 45)},
    ("obj", "head->dep"): {"WMT": (78, 41), "OpenSubtitles": (61, 46)},
    ("obj", "dep->head"): {"WMT": (73, 41), "OpenSubtitles": (84, 46)},
    ("amod", "head->dep"): {"WMT": (74, 72), "OpenSubtitles": (81, 80)},
    ("amod", "dep->head"): {"WMT": (82, 72), "OpenSubtitles": (81, 80)},
    ("advmod", "head->dep"): {"WMT": (48, 46), "OpenSubtitles": (38, 33)},
    ("advmod", "dep->head"): {"WMT": (52, 46), "OpenSubtitles": (42, 33)},
}

RARE = {"top_n": 500, "rarest": {"OpenSubtitles": 0.66}, "two_rarest": {"OpenSubtitles": 0.83, "WMT": 0.5}}

# Encoder-head pruning: (data, heads kept of 48, BLEU change)
ENCODER_PRUNING = [("WMT EN-RU", 10, -0.15), ("OpenSubtitles EN-RU", 4, -0.25)]
SURVIVOR_ROLES_AT_48 = {"positional": 5, "syntactic": 8, "rare": 1, "other": 34}

# Table 2: heads kept (enc-self, dec-self, dec-enc), BLEU pruned, BLEU from scratch
TABLE2 = {
    "WMT": [((14, 31, 30), 29.62, 29.47), ((12, 21, 25), 29.36, 28.95),
            ((8, 13, 15), 29.06, 28.56), ((5, 9, 12), 28.90, 28.41)],
    "OpenSubtitles": [((27, 31, 46), 32.24, 32.23), ((13, 17, 31), 32.23, 31.98),
                      ((6, 9, 13), 32.27, 31.84)],
}

# Read off figures rather than printed in the text, so approximate: SETTING["baseline_bleu"], TABLE1, RARE,
# ENCODER_PRUNING (OpenSubtitles), SURVIVOR_ROLES_AT_48, TABLE2. The findings themselves, each with the paper's
# number beside the criterion that judges it, are minihead.findings.FINDINGS.
