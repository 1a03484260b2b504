# %% [markdown]
# # Chapter 6: Pruning all attention types, and pruning versus training from scratch
#
# Chapter 5 gated the encoder's self-attention only. Voita et al. (2019, sec. 8) then put a gate on **every** head of
# all three attention types, encoder self-attention (`enc`), decoder self-attention (`dec_self`) and
# decoder-encoder attention (`dec_enc`), one penalty $\lambda L_C$ summed over all of them, and let every weight of
# the model train. Their findings:
#
# * **Encoder self-attention heads go first, decoder-encoder heads last.** At every $\lambda$ the encoder keeps the
#   smallest share of its heads and the decoder-encoder attention the largest.
# * **Where heads survive:** decoder self-attention mostly in the lower layers, decoder-encoder attention mostly in
#   the higher layers.
# * **Pruning beats training from scratch** (their Table 2): the pruned model is better than the same head
#   configuration (the same heads fixed off) trained from a random initialisation.
#
# This chapter runs the same experiment with `minihead.prune` on the study model. "Same budget" for the model
# trained from scratch means the same number of training tokens: the study model's training steps plus the pruning
# steps (counted in batches of the study's size), from the study's random initialisation with the study's schedule,
# batches and dropout, the pruned heads' gates fixed at 0 and the others at 1 (`train.train(..., gates=masks)`).
# Both models are scored at their last step (no checkpoint selection), with the same gates, on the same test
# sentences.

# %%
import os
import sys
sys.path.insert(0, os.path.abspath(".."))   # run from chapters/
QUICK = os.environ.get("MINIHEAD_QUICK", "0") == "1"

# %%
import time
import matplotlib.pyplot as plt

from minihead import backend, paper
from minihead import prune as P
from minihead.backend import xp
from minihead.model import GATE_KINDS
from minihead.study import load_study

T0 = time.time()
host = backend.to_host
# Quick mode (the tests, CI): the 3+3 x 4-head quick model, two lambdas, 100 pruning steps in half-size batches
# (1250 tokens), gates at lr 0.2, BLEU on the first 200 test sentences, and ONE configuration trained from scratch
# (the most pruned one; ~650 training steps is most of this chapter's time). Full mode: the default 6+6 x 4-head
# model, two lambdas, 400 steps in the training batch size, gates at lr 0.1, the whole test set, both
# configurations also trained from scratch (~15 min each on 2 cores).
from minihead.reproduce import SCALES      # the settings `python -m minihead reproduce` uses too (shared cache)
S = SCALES["quick" if QUICK else "full"]
STUDY, STEPS, N_TEST = S["study"], S["prune_steps"], S["n_test"]
LAMBDAS, N_SCRATCH = S["all_lambdas"], S["n_scratch"]
PRUNE = {**S["prune"], **S["prune_all"]}
LR_GATES, MAX_TOKENS = PRUNE["lr_gates"], PRUNE["max_tokens"]
NAMES = {"enc": "encoder self", "dec_self": "decoder self", "dec_enc": "decoder-encoder"}

study = load_study(STUDY, progress=False)
cfg = study.cfg
total = {k: cfg.n_layers(k) * cfg.n_heads for k in GATE_KINDS}
print(f"study model {study.name!r}: heads per attention type {total}")

# %% [markdown]
# ## 1. The sweep over all attention types
#
# One run per $\lambda$; every weight trains (lr 1e-3) and every head has a gate. The test BLEU of the model before
# pruning is the reference (cached, shared with chapter 5).

# %%
base = P.baseline(study, n_test=N_TEST)
runs = P.sweep(study, LAMBDAS, "all", STEPS, n_test=N_TEST, **PRUNE)
print(f"\nbefore pruning: test BLEU {base['bleu']:.2f} ({N_TEST} sentences)")
print(f"{'lambda':>7}  {'enc':>7} {'dec_self':>9} {'dec_enc':>8}   BLEU")
for r in runs:
    n = r["n_retained"]
    print(f"{r['lam']:>7g}  {n['enc']:>3}/{total['enc']:<3} {n['dec_self']:>4}/{total['dec_self']:<4} "
          f"{n['dec_enc']:>3}/{total['dec_enc']:<4} {r['bleu']:6.2f}")

# %% [markdown]
# ## 2. Which type goes first
#
# Left: the open heads of each type along the run with the largest $\lambda$ (as a share of that type's heads).
# Right: the share retained at the end of each run.

# %%
last = runs[-1]
fig, axes = plt.subplots(1, 2, figsize=(12, 3.4))
for k in GATE_KINDS:
    steps = [h["step"] for h in last["history"]]
    axes[0].plot(steps, [h["open"][k] / total[k] for h in last["history"]], label=NAMES[k])
    axes[1].plot([r["lam"] for r in runs], [r["n_retained"][k] / total[k] for r in runs], "o-", label=NAMES[k])
axes[0].set(xlabel="pruning step", ylabel="share of heads open", title=f"lambda {last['lam']:g}")
axes[1].set(xscale="log", xlabel="lambda", ylabel="share of heads retained")
axes[0].legend(fontsize=8)
plt.tight_layout()

first, t_half = P.encoder_closes_first(last, cfg)      # kind -> first logged step with at most half open
for k in GATE_KINDS:
    print(f"{NAMES[k]:>16}: half of the heads closed at step {t_half[k]}")

# %% [markdown]
# ## 3. In which layers heads survive
#
# Retained heads per layer and type, for each run (a cell is a head; dark = retained).

# %%
fig, axes = plt.subplots(len(runs), 3, figsize=(9, 1.9 * len(runs)), squeeze=False)
for i, r in enumerate(runs):
    for j, k in enumerate(GATE_KINDS):
        m = xp.asarray(r["retained"][k], dtype="float64")              # (L, H)
        ax = axes[i, j]
        ax.imshow(host(m), cmap="Greys", vmin=0, vmax=1)
        ax.set(xticks=range(cfg.n_heads), yticks=range(cfg.n_layers(k)), xlabel="head", ylabel="layer")
        ax.set_title(f"{NAMES[k]}, lambda {r['lam']:g}: {int(m.sum())}", fontsize=9)
plt.tight_layout()

mid = (cfg.n_dec_layers - 1) / 2
for r in runs:
    print(f"lambda {r['lam']:g}: mean layer of retained heads (0 = lowest, middle {mid:g}): "
          + ", ".join(f"{NAMES[k]} {P.mean_layer(r['retained'][k]):.2f}" for k in GATE_KINDS))

# %% [markdown]
# ## 4. Pruned versus trained from scratch (Table 2)
#
# For the most pruned configurations: the same heads switched off, trained from the random initialisation for the
# same budget. The paper's rows beside ours (heads kept enc-self / dec-self / dec-enc of 48 each, BLEU).

# %%
budget = P.scratch_budget(study, STEPS, prune_max_tokens=MAX_TOKENS)
print(f"from-scratch budget: {study.history[-1]['step']} training steps + {STEPS} pruning steps of "
      f"{MAX_TOKENS} tokens = {budget} steps of the study's batch size")
chosen = runs[-N_SCRATCH:]
scratch = [P.from_scratch(study, r["retained"], budget, n_test=N_TEST) for r in chosen]
rows = []
for r, s in zip(chosen, scratch):
    heads = tuple(r["n_retained"][k] for k in GATE_KINDS)
    rows.append((heads, r["bleu"], s["bleu"]))
print(f"\nours ({study.name}, {total['enc']} heads per type; before pruning {base['bleu']:.2f} BLEU)")
print(f"{'heads':>12} {'pruned':>7} {'scratch':>8}")
for heads, bp, bs in rows:
    print(f"{'/'.join(map(str, heads)):>12} {bp:7.2f} {bs:8.2f}")
for data, table in paper.TABLE2.items():
    print(f"\npaper, {data} (48 heads per type)")
    for heads, bp, bs in table:
        print(f"{'/'.join(map(str, heads)):>12} {bp:7.2f} {bs:8.2f}")

# %% [markdown]
# ## 5. What reproduced
#
# Three checks, each with the paper's claim beside what we measured:
#
# 1. **Order of pruning** (paper: encoder self-attention first, decoder-encoder last). At every $\lambda$, the share
#    of heads retained is smallest for encoder self-attention, largest for decoder-encoder attention, decoder
#    self-attention in between; and along the run with the largest $\lambda$ the encoder is the first type to lose
#    half of its heads. **Reproduces** at both scales. Quick mode: at $\lambda = 0.1$ the encoder keeps no
#    self-attention head at all: its layers are then feed-forward blocks over the embeddings and position
#    encodings. Full mode (the default model of the cold `python -m minihead reproduce` run, 24 heads per type):
#    4 / 7 / 8 heads kept at $\lambda = 0.03$ and 2 / 3 / 4 at $\lambda = 0.1$; along the $\lambda = 0.1$ run half
#    of the encoder heads are closed at step 55, of the decoder self-attention heads at 60, of the decoder-encoder
#    heads at 75.
# 2. **Where heads survive** (paper: decoder self-attention in the lower layers, decoder-encoder attention in the
#    higher ones). For every run that pruned some heads of that type, the mean layer of the survivors lies below
#    the middle layer for decoder self-attention and above it for decoder-encoder attention. **Reproduces** at both
#    scales (full mode: decoder self-attention survivors at mean layer 1.14 and 0.67, decoder-encoder survivors at
#    3.25 and 3.25, middle 2.5).
# 3. **Pruned beats from scratch** (paper: every configuration of Table 2). **Did not reproduce at either scale.**
#    Quick mode:
#    the most pruned configuration, trained from scratch for the same budget, translates about 3 BLEU better than
#    the pruned model, and only about 1 BLEU below the full model before pruning. Our from-scratch run gets the whole
#    learning-rate schedule (warm-up and the high early rates) for a small model on a regular synthetic language
#    that it learns in a few hundred steps, while the pruned model gets 100 steps at a low constant rate to recover
#    from losing most of its heads; at this scale that is the better deal. Full mode: the same, more so. The two
#    configurations trained from scratch for 2,800 steps score 80.97 (4 / 7 / 8 heads) and 79.03 (2 / 3 / 4 heads),
#    at or above the full model before pruning (78.12), against 77.64 and 68.30 pruned: 400 pruning steps at a low
#    rate do not let a 6-layer model recover from losing most of its heads in all three attention types, while a
#    model trained with only those heads from the start learns to do without the others. The final cell asserts the measured outcome at both scales,
#    with the paper's claim stated beside it.
#
# The same sweep with `seed=1` (run while writing this chapter) gave the same picture: 1 / 8 / 12 heads at
# $\lambda = 0.03$ and 0 / 3 / 8 at $\lambda = 0.1$ (BLEU 35.6), decoder self-attention heads only in the lowest
# layer, decoder-encoder heads weighted towards the top layer (2 / 2 / 4 over layers 0 / 1 / 2 at $\lambda = 0.1$).

# %%
# Finding 1 (paper: encoder self-attention heads go first, decoder-encoder heads last).
# At every lambda: share retained enc <= dec_self <= dec_enc, enc < dec_enc (prune.type_order_holds).
for r in runs:
    assert P.type_order_holds(r, cfg), (r["lam"], P.retained_shares(r, cfg))
# Along the run with the largest lambda, the encoder is the first type to lose half of its heads.
assert first, t_half
print("finding 1 holds: encoder self-attention heads are pruned first, decoder-encoder heads last")
# Finding 2 (paper: decoder self-attention survives in lower layers, decoder-encoder attention in higher ones).
layer_checks = [(r["lam"], *c) for r in runs for c in P.survivor_layers(r, cfg)]   # (lam, kind, mean layer, holds)
assert len(layer_checks) >= 2 and all(holds for *_, holds in layer_checks), layer_checks
checked = len(layer_checks)
print(f"finding 2 holds: decoder self-attention survives low, decoder-encoder attention high ({checked} checks)")
# Finding 3 (paper: the pruned model beats the same configuration trained from scratch, Table 2).
wins = [bp > bs for _, bp, bs in rows]
print(f"pruned better than from scratch in {sum(wins)} of {len(rows)} configurations (paper: 7 of 7)")
# Measured at both scales: NOT reproduced (paper: pruned wins in every configuration); from scratch is better.
assert not any(wins), rows
print("finding 3 did not reproduce: the configurations trained from scratch are better (see the text above)")
print(f"chapter done in {time.time() - T0:.0f} s")
