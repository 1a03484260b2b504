# %% [markdown]
# # minihead: the chapters
#
# A from-scratch NumPy reproduction of Voita et al. (ACL 2019), *Analyzing Multi-Head Self-Attention: Specialized
# Heads Do the Heavy Lifting, the Rest Can Be Pruned*. Work through the chapters in order; each reads top to bottom,
# ends with cells that judge the paper's findings against a **study over seeds** (`chapters/studies/`): a finding
# that held in every seed is asserted for the chapter's model, one that held in some is shown with each seed's
# numbers, one that held in none is stated as not reproduced. Every chapter is executed by the test suite in quick
# mode.
#
# | chapter | what it shows |
# |---|---|
# | [01 A Transformer from scratch](01_transformer_from_scratch.ipynb) | layers with hand-written backprop, a live gradient check, training, translations, encoder attention maps |
# | [02 Head importance with LRP](02_head_importance_lrp.ipynb) | LRP rules checked live (slow twins, conservation), head relevance (Figure 1), confidence, Michel importance, single-head ablation, rank agreement |
# | [03 Head roles](03_head_roles.ipynb) | positional, syntactic (against gold trees, Table 1) and rare-word heads; roles over relevance; the heads emerging along training, against the control |
# | [04 Hard-concrete gates](04_hard_concrete_gates.ipynb) | the gate distribution, the L0 penalty, its gradient checks, useless toy heads closing |
# | [05 Pruning encoder heads](05_pruning_encoder_heads.ipynb) | the lambda sweep, BLEU against retained heads (Figure 7), roles of the survivors (Figure 8); with eight heads a layer, the survivors against the need matrix |
# | [06 Pruning all attention types](06_pruning_all_attention.ipynb) | which attention type goes first, where heads survive, pruned versus trained from scratch (Table 2) |
# | [07 Real language](07_real_language.ipynb) | the same analysis with a model trained on Multi30k EN-DE (BPE) and judged on UD English EWT trees |
#
# The cell below prints how long each chapter took when it was last executed, read from the notebook itself
# (`chapters/execute.py` records it); a first run in full mode trains the default model and runs the sweeps first
# (cold times: `docs/studies.md`).
#
# Quick mode is switched on with the environment variable `MINIHEAD_QUICK=1` (the tests set it); without it the
# chapters use the default model (the `emerge` recipe, in which the paper's head functions form; chapter 7 trains the
# same recipe on Multi30k). Every trained model and every sweep is cached in `runs/`, so a chapter re-runs in
# seconds once its stages exist, and `python -m minihead reproduce` reuses the same caches (its cold full run fills
# every cache the chapters' full mode reads).
#
# **CuPy.** Start Jupyter with `MINIHEAD_BACKEND=cupy` (and `pip install cupy-cuda12x` on a machine with an NVIDIA
# GPU) and the same chapters run on the GPU: every array goes through `minihead.backend.xp`. Without a GPU that
# setting is an error, never a silent fallback.
#
# **Reading the tests as the specification.** Each formula of the package is pinned down by a test whose docstring
# states it: `tests/test_layers.py` (every layer's backward against central differences and autograd),
# `tests/test_model_grad.py` (the whole model), `tests/test_lrp.py` (each relevance rule against a slow loop, and
# conservation), `tests/test_gates.py` (the hard-concrete gate).

# %%
import os
import sys
sys.path.insert(0, os.path.abspath(".."))   # run from chapters/
QUICK = os.environ.get("MINIHEAD_QUICK", "0") == "1"

# %%
import pathlib
from minihead import backend
chapters = sorted(p.name for p in pathlib.Path(".").glob("[0-9][0-9]_*.ipynb"))
print("backend:", backend.name, "| quick mode:", QUICK)
print("\n".join(chapters))
assert chapters[0] == "00_index.ipynb" and len(chapters) >= 7, chapters

# %%
import json
print("| chapter | last executed | mode | seconds |\n|---|---|---|---|")
for name in chapters:
    run = json.load(open(name, encoding="utf-8"))["metadata"].get("minihead", {})
    print(f"| {name} | {run.get('executed', '-')} | {run.get('mode', '-')} | {run.get('seconds', '-')} |")

# %% [markdown]
# ## Exercises
#
# Each solution is a function of `chapters/solutions/00_solutions.py`, runnable from the repository root
# (`python chapters/solutions/00_solutions.py exercise_K`) and checked by `tests/test_solutions.py`; it
# ends with asserts on its result.
#
# 1. **Read a study over seeds.** Open `chapters/studies/quick.json`; for every per-model finding of `minihead.findings.FINDINGS` (those not in `findings.POOLED`) print in how many of its testable seeds it held, and check that its `status` (`holds`, `varies`, `does not hold`), the word the chapters act on, agrees with that count.
#    - *Hint:* `json.load` the file; the counts are under `summary[name]["held_in"]` and `["testable"]`.
#    - Solution: `solutions/00_solutions.py`, `exercise_1`.
