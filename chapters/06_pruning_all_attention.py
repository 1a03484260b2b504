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
# This chapter runs the same experiment with `minihead.prune` on the study model, and judges the three findings
# over a study of several seeds (section 5). "Same budget" for the model
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

from minihead import backend, findings, paper, stages
from minihead import prune as P
from minihead.backend import xp
from minihead.model import GATE_KINDS
from minihead.study import load_study

T0 = time.time()
host = backend.to_host
# Quick mode (the tests, CI): the quick model (3+2 layers x 2 heads of 32), two lambdas, pruning in half-size batches (1250 tokens)
# until 90% of the gates are settled (STEPS is the cap), gates at lr 0.2, BLEU on the first 200 test sentences, and
# ONE configuration trained from scratch (the most pruned one; its training is most of this chapter's time). Full
# mode: the default model (6+2 layers x 2 heads of 64), two lambdas, the training batch size, gates at lr 0.1, the
# whole test set, both configurations also trained from scratch.
from minihead.study import SCALES      # the settings `python -m minihead reproduce` uses too (shared cache)
SCALE = "quick" if QUICK else "full"
S = SCALES[SCALE]
STUDY, STEPS, N_TEST = S["study"], S["prune_steps"], S["n_test"]
LAMBDAS, N_SCRATCH = S["all_lambdas"], S["n_scratch"]
PRUNE = P.PruneSettings.of(**{**S["prune"], **S["prune_all"]})     # how every run trains
LR_GATES, MAX_TOKENS = PRUNE.lr_gates, PRUNE.max_tokens
NAMES = {"enc": "encoder self", "dec_self": "decoder self", "dec_enc": "decoder-encoder"}

study = load_study(STUDY, progress=False)
cfg = study.cfg
total = {k: cfg.n_layers(k) * cfg.n_heads for k in GATE_KINDS}
print(f"study model {study.name!r}: heads per attention type: " + ", ".join(f"{NAMES[k]} {n}" for k, n in total.items()))

# %% [markdown]
# ## 1. The sweep over all attention types
#
# One run per $\lambda$; every weight trains (lr 1e-3) and every head has a gate. The test BLEU of the model before
# pruning is the reference (cached, shared with chapter 5).

# %%
base = stages.baseline(study, n_test=N_TEST)
runs = stages.sweep(study, LAMBDAS, "all", STEPS, PRUNE, n_test=N_TEST)
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

first, t_half = findings.encoder_closes_first(last, cfg)      # kind -> first logged step with at most half open
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
          + ", ".join(f"{NAMES[k]} {findings.mean_layer(r['retained'][k]):.2f}" for k in GATE_KINDS))

# %% [markdown]
# ## 4. Pruned versus trained from scratch (Table 2)
#
# For the most pruned configurations: the same heads switched off, trained from the random initialisation for the
# same budget. The paper's rows beside ours (heads kept enc-self / dec-self / dec-enc of 48 each, BLEU).

# %%
chosen = runs[-N_SCRATCH:]
budgets = [stages.scratch_steps(study, S, r) for r in chosen]   # the scale's rule, as `reproduce` reads it
for r, budget in zip(chosen, budgets):
    print(f"from-scratch budget for lambda {r['lam']:g}: {study.history[-1]['step']} training steps + "
          f"{r['steps_used']} pruning steps of {MAX_TOKENS} tokens = {budget} steps of the study's batch size")
# the pruning steps each run used, as `python -m minihead reproduce` counts them (so its cache is shared)
scratch = [stages.from_scratch(study, r["retained"], budget, n_test=N_TEST) for r, budget in zip(chosen, budgets)]
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
# ## 5. The paper's claims, judged over seeds
#
# One model's sweep of a few $\lambda$ and one from-scratch training per configuration cannot tell a finding from
# an accident of its seed. So, as in chapters 2 and 5, the three findings are judged on the study over seeds that
# `python -m minihead reproduce --quick --seeds 1,2,3` ran with this chapter's settings (`SCALES`, the same cached
# stages), by the criteria of `minihead/findings.py`:
#
# 1. **Encoder first** (`findings.encoder_pruned_first`; paper, sec. 6.3: encoder self-attention heads are the
#    first to be pruned). In every run that pruned some head, encoder self-attention keeps a strictly smaller share
#    of its heads than both decoder types; a run that pruned nothing says nothing and is left out (counted).
# 2. **Decoder-encoder last** (`findings.decoder_encoder_last`; paper: decoder-encoder heads are retained the
#    longest), its own finding: in every such run decoder-encoder attention keeps a strictly larger share than
#    decoder self-attention; a tie does not count.
# 3. **Where heads survive** (`findings.decoder_layer_order`; paper: decoder self-attention in the lower layers,
#    decoder-encoder attention in the higher ones). For every run and decoder type that lost heads, the mean layer
#    of the survivors lies below the middle layer (decoder self-attention) or above it (decoder-encoder).
# 4. **Pruned beats from scratch** (`findings.pruned_beats_scratch`; paper: every configuration of Table 2, by 0.01
#    to 0.50 BLEU), for the same budget of training tokens: the mean pruned - from-scratch gap over every
#    configuration of every seed, with its 95% interval; holds when the interval lies above 0. Two things favour the model trained from scratch at a small scale: it gets the whole learning-rate
#    schedule (warm-up and the high early rates) for a small model on a regular synthetic language, while the
#    pruned model gets only the steps its gates needed to settle, at a low constant rate, to recover from losing
#    most of its heads.
#
# A per-model finding that holds in every seed is asserted for this model too; a pooled one is stated with its test;
# one that varies is shown; one that does not hold is stated as not reproduced; an untestable one says why.

# %%
from minihead import findings
from minihead.study import judge_against_study

CLAIMS = ("encoder_first", "dec_enc_last", "decoder_layers", "pruned_vs_scratch")
verdicts = {"encoder_first": findings.encoder_pruned_first(runs, cfg),          # as findings.study_verdicts
            "dec_enc_last": findings.decoder_encoder_last(runs, cfg),
            "decoder_layers": findings.decoder_layer_order(runs, cfg),
            "pruned_vs_scratch": findings.pruned_beats_scratch([r["bleu"] for r in chosen],
                                                               [sc["bleu"] for sc in scratch])}
ev, lv, dv, pv = (verdicts[n] for n in CLAIMS)
print(f"this model ({study.name}), lambda " + ", ".join(f"{r['lam']:g}" for r in runs) + ":")
for r in runs:
    print(f"  lambda {r['lam']:g}: heads kept " + ", ".join(f"{NAMES[k]} {r['n_retained'][k]}/{total[k]}"
                                                          for k in GATE_KINDS))
print(f"  1. encoder first: {ev.status}; {ev.text()}")
print(f"  2. decoder-encoder last: {lv.status}; {lv.text()}")
print(f"  3. {dv.text()} (middle {mid:g}): {dv.status}")
print("  4. pruned against from scratch, BLEU: "
      + ", ".join(f"{p:.2f} vs {s_:.2f} ({'/'.join(map(str, heads))} heads)" for (p, s_), (heads, _, _) in
                  zip(pv.pairs, rows))
      + f" (before pruning {base['bleu']:.2f}); paper: every one of its "
      + str(sum(len(tab) for tab in paper.TABLE2.values())) + " configurations, by "
      + f"{min(bp - bs for tab in paper.TABLE2.values() for _, bp, bs in tab):+.2f} to "
      + f"{max(bp - bs for tab in paper.TABLE2.values() for _, bp, bs in tab):+.2f} BLEU")

print()
status = judge_against_study(SCALE, verdicts, names=CLAIMS, strict=QUICK)   # quick: the shipped study must exist

# The runs themselves: every run stopped because its gates settled, or at the step cap.
assert all((r["settled"] or r["steps_used"] == STEPS) and r["steps_used"] <= STEPS for r in runs), \
    [(r["lam"], r["settled_share"], r["steps_used"]) for r in runs]
print(f"chapter done in {time.time() - T0:.0f} s")

# %% [markdown]
# ## Exercises
#
# Each solution is a function of `chapters/solutions/06_solutions.py`, runnable from the repository root
# (`python chapters/solutions/06_solutions.py exercise_K`) and checked by `tests/test_solutions.py`; it
# ends with asserts on its result.
#
# 1. **Which type goes first, from the log.** Write two pruning logs by hand, one where the encoder loses half its heads first and one where decoder self-attention does, and check `findings.encoder_closes_first`.
#    - *Hint:* A log entry is `{"step": ..., "open": {kind: heads open}}`; `half_closed_step` reads it.
#    - Solution: `solutions/06_solutions.py`, `exercise_1`.
# 2. **Where heads survive.** Make runs whose decoder self-attention survivors sit in layer 0 and decoder-encoder survivors in layer 1, and the mirror image; check `findings.survivor_layers` and `findings.type_order_holds`.
#    - *Hint:* A run is `{"retained": {kind: (L, H) mask}, "n_retained": {kind: count}}`; the middle layer is $(L_{dec} - 1)/2$.
#    - Solution: `solutions/06_solutions.py`, `exercise_2`.
# 3. **Judging Table 2.** Feed `findings.pruned_beats_scratch` made-up BLEU for two seeds of two configurations, and `findings.summarize` the seeds: find a case that holds (the gap's 95% interval above 0), one with a LARGER mean gain that does not, and say why.
#    - *Hint:* The summary's `"pooled"` holds the mean gap and its interval (`low`, `high`); the interval's width grows with the spread of the gaps.
#    - Solution: `solutions/06_solutions.py`, `exercise_3`.
# 4. **Gates on every type of a tiny model.** Prune an untrained tiny model with `kinds=model.GATE_KINDS` at $\lambda = 0$ and at a large $\lambda$, and read the share kept per type with `findings.retained_shares`.
#    - *Hint:* Freeze the weights (`lr_params=0.0`); the run's `history` counts the open heads of every type.
#    - Solution: `solutions/06_solutions.py`, `exercise_4`.
