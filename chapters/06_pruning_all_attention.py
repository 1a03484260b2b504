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
# trained from scratch means the same number of training tokens: the study model's training steps plus the steps
# that pruning run actually used (it stops once 90% of the gates are settled, chapter 5; counted in batches of the
# study's size), from the study's random initialisation with the study's schedule,
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
# Quick mode (the tests, CI): the 3+3 x 4-head quick model, two lambdas, pruning in half-size batches (1250 tokens)
# until 90% of the gates are settled (STEPS is the cap), gates at lr 0.2, BLEU on the first 200 test sentences, and
# ONE configuration trained from scratch (the most pruned one; its training is most of this chapter's time). Full
# mode: the default 6+6 x 4-head model, two lambdas, the training batch size, gates at lr 0.1, the whole test set,
# both configurations also trained from scratch.
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
print(f"{'lambda':>7}  {'enc':>7} {'dec_self':>9} {'dec_enc':>8}   BLEU (continuous)  settled  steps")
for r in runs:
    n = r["n_retained"]
    print(f"{r['lam']:>7g}  {n['enc']:>3}/{total['enc']:<3} {n['dec_self']:>4}/{total['dec_self']:<4} "
          f"{n['dec_enc']:>3}/{total['dec_enc']:<4} {r['bleu']:6.2f} ({r['bleu_continuous']:6.2f})  "
          f"{r['settled_share']:7.2f}  {r['steps_used']:5d}")

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
chosen = runs[-N_SCRATCH:]
budgets = [P.scratch_budget(study, r["steps_used"], prune_max_tokens=MAX_TOKENS) for r in chosen]
for r, budget in zip(chosen, budgets):
    print(f"from-scratch budget for lambda {r['lam']:g}: {study.history[-1]['step']} training steps + "
          f"{r['steps_used']} pruning steps of {MAX_TOKENS} tokens = {budget} steps of the study's batch size")
# the pruning steps each run used, as `python -m minihead reproduce` counts them (so its cache is shared)
scratch = [P.from_scratch(study, r["retained"], budget, n_test=N_TEST) for r, budget in zip(chosen, budgets)]
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
#    half of its heads.
# 2. **Where heads survive** (paper: decoder self-attention in the lower layers, decoder-encoder attention in the
#    higher ones). For every run that pruned some heads of that type, the mean layer of the survivors lies below
#    the middle layer for decoder self-attention and above it for decoder-encoder attention.
# 3. **Pruned beats from scratch** (paper: every configuration of Table 2), compared for the same budget of
#    training tokens. At our scale the comparison favours training from scratch: that run gets the whole
#    learning-rate schedule (warm-up and the high early rates) for a small model on a regular synthetic language,
#    while the pruned model gets only the steps its gates needed to settle, at a low constant rate, to recover from
#    losing most of its heads.
#
# The next cell prints what this run measured, in words, and asserts the outcomes. (The default model's numbers
# quoted in earlier versions of this chapter were measured on the previous language, before its translation needed
# the head functions, and are not repeated here.)

# %%
order_ok = all(P.type_order_holds(r, cfg) for r in runs)
layer_checks = [(r["lam"], *c) for r in runs for c in P.survivor_layers(r, cfg)]   # (lam, kind, mean layer, holds)
wins = [bp > bs for _, bp, bs in rows]
lams = ", ".join(f"{r['lam']:g}" for r in runs)
print("In words: at every lambda the encoder keeps "
      + ", ".join(f"{r['n_retained']['enc']}/{total['enc']}" for r in runs)
      + " of its self-attention heads, the decoder self-attention "
      + ", ".join(f"{r['n_retained']['dec_self']}/{total['dec_self']}" for r in runs)
      + " and the decoder-encoder attention "
      + ", ".join(f"{r['n_retained']['dec_enc']}/{total['dec_enc']}" for r in runs)
      + f" (lambda {lams}): finding 1 "
      + ("reproduces" if order_ok and first else "does NOT reproduce")
      + ". Survivors' mean layers: "
      + "; ".join(f"lambda {lam:g} {NAMES[k]} {m:.2f}" for lam, k, m, _ in layer_checks)
      + f" (middle {mid:g}): finding 2 " + ("reproduces" if layer_checks and all(h for *_, h in layer_checks)
                                            else "does NOT reproduce")
      + ". From scratch, the same heads score "
      + ", ".join(f"{bs:.2f} against {bp:.2f} pruned ({'/'.join(map(str, heads))} heads)" for heads, bp, bs in rows)
      + f" (model before pruning {base['bleu']:.2f}): finding 3 "
      + ("reproduces." if all(wins) else "does NOT reproduce." if not any(wins) else "holds in part.")
      + (" The encoder keeps no self-attention head at the largest lambda: its layers are then feed-forward blocks "
         "over the embeddings and position encodings." if runs[-1]["n_retained"]["enc"] == 0 else ""))

# Finding 1 (paper: encoder self-attention heads go first, decoder-encoder heads last).
# At every lambda: share retained enc <= dec_self <= dec_enc, enc < dec_enc (prune.type_order_holds).
for r in runs:
    assert P.type_order_holds(r, cfg), (r["lam"], P.retained_shares(r, cfg))
# Along the run with the largest lambda, the encoder is the first type to lose half of its heads.
assert first, t_half
print("\nfinding 1 holds: encoder self-attention heads are pruned first, decoder-encoder heads last")
# Finding 2 (paper: decoder self-attention survives in lower layers, decoder-encoder attention in higher ones).
assert len(layer_checks) >= 2 and all(holds for *_, holds in layer_checks), layer_checks
print(f"finding 2 holds: decoder self-attention survives low, decoder-encoder attention high "
      f"({len(layer_checks)} checks)")
# Finding 3 (paper: the pruned model beats the same configuration trained from scratch, Table 2): printed above;
# asserted only where the gap is clear (more than 1 BLEU either way), since one run of each is compared.
print(f"pruned better than from scratch in {sum(wins)} of {len(rows)} configurations (paper: 7 of 7)")
clear = [(bp - bs) for _, bp, bs in rows if abs(bp - bs) > 1.0]
print(f"configurations with a gap over 1 BLEU: {len(clear)} (pruned - scratch: "
      + ", ".join(f"{d:+.2f}" for d in clear) + ")")
if QUICK:
    # quick model, measured: NOT reproduced, from scratch better by more than 1 BLEU in every configuration
    assert rows and all(bs - bp > 1.0 for _, bp, bs in rows), rows
    print("finding 3 did not reproduce in quick mode: the configuration trained from scratch is better")
print(f"chapter done in {time.time() - T0:.0f} s")
