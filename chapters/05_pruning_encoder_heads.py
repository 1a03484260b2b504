# %% [markdown]
# # Chapter 5: Pruning encoder heads: most of them can go
#
# Voita et al. (2019, sec. 6) take a **converged** Transformer, put a hard-concrete gate on every encoder
# self-attention head (chapter 4) and **continue training** with the expected number of open gates as a penalty:
#
# $$L(\theta, \phi) = L_{xent}(\theta, \phi) + \lambda\, L_C(\phi), \qquad
# L_C(\phi) = \sum_{l,h} \Big(1 - P(g_{lh} = 0 \mid \phi_{lh})\Big)
# = \sum_{l,h} \sigma\!\Big(\log\alpha_{lh} - \beta \log\frac{-\gamma}{\zeta}\Big) .$$
#
# The decoder is frozen; the larger $\lambda$, the fewer heads stay open. Sweeping $\lambda$ traces BLEU against the
# number of retained encoder heads (their Figure 7): on WMT EN-RU **10 of 48** heads keep the BLEU within **0.15**,
# on OpenSubtitles **4 of 48** within **0.25**. And the heads that survive longest are the ones with a function
# (positional, syntactic, rare-word; their Figure 8).
#
# This chapter runs that sweep with `minihead.prune` on the study model and checks both findings at our scale.
#
# **What trains.** The gates' $\log\alpha$ start open ($\log\alpha = 3$: test-time gate exactly 1) and take Adam
# steps of their own with a large learning rate: Adam moves a parameter by about lr per step, and a gate only
# closes once $\log\alpha$ has travelled from $+3$ to below $\log(-\gamma/\zeta) = -2.4$. The encoder's weights train
# with a second Adam at a small constant rate. The decoder is frozen, as in the paper; our model shares one
# embedding matrix between source, target and the output layer, so that matrix belongs to the decoder and is
# frozen too. Only the encoder layers and the encoder's final LayerNorm change.

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
from minihead.study import load_study

T0 = time.time()
host = backend.to_host
# Quick mode (the tests, CI): the 3+3 x 4-head quick model, pruning in half-size batches (1250 tokens) with gates at
# lr 0.2, BLEU on the first 200 test sentences. Full mode: the default 6+6 x 4-head model, the training batch size,
# gates at lr 0.1, the whole test set (1000). In both, a run trains until 90% of its gates are settled (see below);
# STEPS is only the cap.
from minihead.reproduce import SCALES      # the settings `python -m minihead reproduce` uses too (shared cache)
S = SCALES["quick" if QUICK else "full"]
STUDY, STEPS, N_TEST, LAMBDAS = S["study"], S["prune_steps"], S["n_test"], S["enc_lambdas"]
PRUNE = dict(S["prune"])
LR_GATES, MAX_TOKENS = PRUNE["lr_gates"], PRUNE["max_tokens"]
SMALL_COST = 1.0   # "a small BLEU cost" at our scale: within 1 BLEU of the model before pruning

study = load_study(STUDY, progress=False)
cfg = study.cfg
n_heads = cfg.n_enc_layers * cfg.n_heads
print(f"study model {study.name!r}: {cfg.n_enc_layers} encoder layers x {cfg.n_heads} heads = {n_heads} encoder heads")

# %% [markdown]
# ## 1. The model before pruning
#
# Test BLEU with every head (greedy decoding, sacreBLEU on detokenized text). All numbers of this chapter are
# cached under `runs/<study>/` (`prune-*.json`), keyed by every setting and a fingerprint of the model's weights.

# %%
base = P.baseline(study, n_test=N_TEST)
print(f"test BLEU, all {n_heads} encoder heads, first {N_TEST} test sentences: {base['bleu']:.2f}")

# %% [markdown]
# ## 2. The sweep
#
# One pruning run per $\lambda$, all from the same model with the same seed (same batches, same gate noise). The
# run with $\lambda = 0$ is the reference: the same continued training without the penalty, so the BLEU
# differences below measure the pruning and not the extra training steps.
#
# **How long a run trains.** The paper trains until the gates converge to "almost completely closed or completely
# open". A gate counts as *settled* when one of its point masses holds more than 95% of its distribution,
# $\max(P(g = 0), P(g = 1)) > 0.95$ (`HardConcrete.settled`), and a run stops once the settled share of all its
# gates (`gates.settled_share`) reaches 0.9, or at the step cap. `prune_study` records the share reached and the
# steps used.
#
# **Reading the gates at test time.** Kept heads are counted with the paper's binary readout (a gate is 1 where
# $P(g = 1) \ge P(g = 0)$, else 0; chapter 4) and BLEU is measured with it; the official code's continuous readout
# (a kept head may be scaled by a gate between 0 and 1) is reported beside it.

# %%
runs = P.sweep(study, LAMBDAS, "enc", STEPS, n_test=N_TEST, **PRUNE)
ref = runs[0]
assert ref["lam"] == 0.0
print(f"\n{'lambda':>7} {'kept':>5}  per layer      {'BLEU':>6} {'vs lambda=0':>11} {'vs before':>9}   "
      f"continuous: kept  BLEU   settled  steps")
for r in runs:
    m = xp.asarray(r["retained"]["enc"])                                 # (L, H) bool
    per_layer = " ".join(str(int(x)) for x in m.sum(1))
    print(f"{r['lam']:>7g} {r['n_retained']['enc']:>5}  {per_layer:<13} {r['bleu']:>6.2f} "
          f"{r['bleu'] - ref['bleu']:>+11.2f} {r['bleu'] - base['bleu']:>+9.2f}   "
          f"{r['n_retained_continuous']['enc']:>16} {r['bleu_continuous']:>6.2f} {r['settled_share']:>8.2f} "
          f"{r['steps_used']:>6}")

# %% [markdown]
# How a run unfolds: for the first steps almost every training sample of a gate is clipped at exactly 1, so only
# the penalty pulls on $\log\alpha$; once gates leave 1 the cross-entropy pushes back on the heads the model
# needs, and the others close (test-time gate exactly 0). Below, the number of open encoder heads and the
# training cross-entropy along each run.

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 3.4))
for r in runs:
    steps = [h["step"] for h in r["history"]]
    axes[0].plot(steps, [h["open"]["enc"] for h in r["history"]], label=f"lambda {r['lam']:g}")
    axes[1].plot(steps, [h["ce"] for h in r["history"]], label=f"lambda {r['lam']:g}")
axes[0].set(xlabel="pruning step", ylabel="open encoder heads (test-time gate > 0)")
axes[1].set(xlabel="pruning step", ylabel="training cross-entropy (label-smoothed)")
axes[0].legend(fontsize=8)
plt.tight_layout()

# %% [markdown]
# ## 3. BLEU against retained heads (Figure 7)
#
# Left, our sweep. Right, the change in BLEU against the **share** of encoder heads retained, ours (relative to the
# $\lambda = 0$ run) beside the paper's two reported points; the scales differ (48 heads and ~30 BLEU there,
# our numbers above here), so only the shape compares.

# %%
pts = sorted((r["n_retained"]["enc"], r["bleu"]) for r in runs)
fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
axes[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="pruned")
axes[0].axhline(base["bleu"], color="gray", ls="--", label="before pruning")
axes[0].axhline(ref["bleu"], color="gray", ls=":", label="lambda = 0")
axes[0].set(xlabel="retained encoder heads", ylabel=f"test BLEU ({N_TEST} sentences)", title=f"{study.name} model")
axes[0].legend(fontsize=8)
axes[1].plot([p[0] / n_heads for p in pts], [p[1] - ref["bleu"] for p in pts], "o-", label="ours")
for data, kept, delta in paper.ENCODER_PRUNING:
    axes[1].plot([kept / 48], [delta], "s", ms=8, label=f"paper, {data}")
axes[1].axhline(0, color="gray", lw=0.5)
axes[1].set(xlabel="share of encoder heads retained", ylabel="BLEU change")
axes[1].legend(fontsize=8)
plt.tight_layout()

# %% [markdown]
# ## 4. Which heads survive, and what they do (Figure 8)
#
# The roles of chapter 3 (`minihead.analysis.head_roles` on the gold dev trees): positional (the argmax lands on
# the same neighbour in at least 90% of the queries where it exists, with confidence above 0.8), syntactic (at
# least 10 points above the best fixed-offset baseline on one relation and direction) and the rare-word head. They are measured on the model **before**
# pruning; pruning fine-tunes the encoder, so a survivor's map may shift a little afterwards. Each row below is one
# run, sorted from all heads down; a cell is coloured when that head survived, by its role.

# %%
from minihead.analysis import head_roles
report = head_roles(study.params, cfg, study.vocab, study.trees["dev"], study.corpus.src_freq)
roles = report.roles                                              # {(l, h): set of roles}
for lh in sorted(roles):
    if roles[lh]:
        print(f"layer {lh[0]} head {lh[1]}: {', '.join(sorted(roles[lh]))}")
print(f"{sum(1 for r in roles.values() if r)} of {n_heads} heads have a role")

# %%
ROLE_CODE = {"positional": 1, "syntactic": 2, "rare": 3}      # a head with several roles shows the first of these
def role_of(lh):
    r = roles.get(lh, set())
    return min((ROLE_CODE[x] for x in r), default=4)           # 4: no role found

order = sorted(runs, key=lambda r: -r["n_retained"]["enc"])
grid = xp.zeros((len(order), n_heads))                          # (runs, L*H) 0 = pruned
for i, r in enumerate(order):
    m = xp.asarray(r["retained"]["enc"])                        # (L, H)
    for l in range(cfg.n_enc_layers):
        for h in range(cfg.n_heads):
            grid[i, l * cfg.n_heads + h] = role_of((l, h)) if m[l, h] else 0
from matplotlib.colors import ListedColormap
cmap = ListedColormap(["white", "tab:blue", "tab:orange", "tab:red", "lightgray"])
fig, ax = plt.subplots(figsize=(max(6, n_heads * 0.45), 0.45 * len(order) + 1.2))
ax.imshow(host(grid), cmap=cmap, vmin=0, vmax=4, aspect="auto")
ax.set_yticks(range(len(order)), [f"{r['n_retained']['enc']} heads (lambda {r['lam']:g})" for r in order])
ax.set_xticks(range(n_heads), [f"{l}.{h}" for l in range(cfg.n_enc_layers) for h in range(cfg.n_heads)], fontsize=7)
ax.set_xlabel("layer.head")
for l in range(1, cfg.n_enc_layers):
    ax.axvline(l * cfg.n_heads - 0.5, color="black", lw=0.8)
ax.set_title("surviving heads: blue positional, orange syntactic, red rare-word, gray no role, white pruned")
plt.tight_layout()

# %% [markdown]
# Are heads with a role over-represented among the survivors? For every run that pruned at least half of the
# heads, the share of role-carrying heads among the survivors beside their share among all heads.

# %%
shares = P.survivor_role_shares(runs, roles, n_heads)              # [(lam, kept, share kept, share all)]
for lam, kept, s_kept, s_all in shares:
    print(f"lambda {lam:g}: {kept} head{'s' if kept != 1 else ''} kept, {s_kept:.0%} of them have a role "
          f"(all heads: {s_all:.0%})")
print("paper, at 48 heads:", paper.SURVIVOR_ROLES_AT_48, "-> all three functions remain at 17 heads")

# %% [markdown]
# ## 5. What reproduced
#
# How much of the above is noise? In the quick model, quite a lot: continued training with dropout moves BLEU on
# 200 sentences by about a point from one seed to the next, and since each run now stops once its gates are
# settled, the runs train for different numbers of steps (the table's last column). So the checks below compare
# against the model **before** pruning, which no training noise moves, and use the best run in a range rather than
# a single run. For the same reason the number of kept heads need not fall strictly with $\lambda$.
#
# 1. **Most heads can go at a small cost.** Paper: 10 of 48 encoder heads (21%) kept within 0.15 BLEU (WMT), 4 of 48
#    (8%) within 0.25 (OpenSubtitles). Ours: the best run that keeps at most a third of the encoder heads scores
#    within `SMALL_COST` = 1 BLEU of the model before pruning.
# 2. **The specialised heads survive.** Paper: positional, syntactic and rare-word heads are the last to be pruned,
#    so the share of role-carrying heads among the survivors exceeds their share among all heads. This can only be
#    tested where the model has heads with a role (chapter 3).
#
# The next cell prints what this run measured, in words, and asserts what is robust. (The numbers of the default
# model quoted in earlier versions of this chapter were measured on the previous language, before its translation
# needed the head functions, and are not repeated here.)

# %%
few = [r for r in runs if r["n_retained"]["enc"] <= n_heads // 3]
best = max(few, key=lambda r: r["bleu"])
print(f"best run keeping at most a third of the heads: {best['n_retained']['enc']} of {n_heads} "
      f"(lambda {best['lam']:g}), BLEU {best['bleu']:.2f}: {best['bleu'] - base['bleu']:+.2f} vs before pruning, "
      f"{best['bleu'] - ref['bleu']:+.2f} vs lambda = 0")
within = [r for r in runs if r["bleu"] >= base["bleu"] - SMALL_COST]
fewest = min(within, key=lambda r: r["n_retained"]["enc"])
print(f"fewest heads within {SMALL_COST} BLEU of the model before pruning: {fewest['n_retained']['enc']} of "
      f"{n_heads} ({1 - fewest['n_retained']['enc'] / n_heads:.0%} pruned, lambda {fewest['lam']:g})")
print("paper:", ", ".join(f"{d}: {k} of 48 kept, {b:+.2f} BLEU" for d, k, b in paper.ENCODER_PRUNING))
by_lam = sorted(runs, key=lambda r: r["lam"])
kept_by_lam = [r["n_retained"]["enc"] for r in by_lam]
settled = [r["settled_share"] for r in runs]
with_role = [lh for lh, r in roles.items() if r]
none_kept = [r for r in runs if r["n_retained"]["enc"] == 0]
print(f"\nIn words: every run stopped with {min(settled):.0%} or more of its gates settled, after "
      f"{min(r['steps_used'] for r in runs)}-{max(r['steps_used'] for r in runs)} steps (cap {STEPS}); the binary "
      "and the continuous readouts kept "
      + ("the same heads in every run" if all(r["n_retained"] == r["n_retained_continuous"] for r in runs) else
         "different numbers of heads in " + ", ".join(f"lambda {r['lam']:g}" for r in runs
                                                      if r["n_retained"] != r["n_retained_continuous"]))
      + f". Heads kept by increasing lambda: {kept_by_lam}. Finding 1 "
      + ("reproduces" if best["bleu"] >= base["bleu"] - SMALL_COST else "does NOT reproduce")
      + f": {best['n_retained']['enc']} of {n_heads} heads score {best['bleu'] - base['bleu']:+.1f} BLEU against "
        "the model before pruning"
      + (f", and even with no encoder head at all (lambda {none_kept[0]['lam']:g}) BLEU changes by only "
         f"{none_kept[0]['bleu'] - base['bleu']:+.1f}: the {study.name} model barely uses its encoder "
         "self-attention, the position encodings and feed-forward layers carry the source" if none_kept else "")
      + ". Finding 2 "
      + (f"is tested on {len(with_role)} role-carrying heads below." if with_role else
         "cannot be tested: no encoder head of this model has a role (chapter 3), so survivors and pruned heads "
         "carry no roles alike."))

# The sweep covers the range from all heads down to one or two, lambda = 0 keeps all and the largest lambda
# the fewest (in between the runs stop at different steps, so the counts need not fall strictly).
counts = sorted(kept_by_lam)
assert counts[-1] == n_heads and counts[0] <= 2, counts
assert kept_by_lam[0] == n_heads and kept_by_lam[-1] == min(kept_by_lam), kept_by_lam
# Every run stopped because its gates settled, or at the step cap.
assert all((r["settled"] or r["steps_used"] == STEPS) and r["steps_used"] <= STEPS for r in runs), settled
# Finding 1 (paper: 10/48 kept for -0.15 BLEU): keeping at most a third of the heads costs at most 1 BLEU.
assert best["bleu"] >= base["bleu"] - SMALL_COST, (best["n_retained"], best["bleu"], base["bleu"])
print("finding 1 holds: most encoder heads pruned at a small BLEU cost")
# Finding 2 (paper: specialised heads are over-represented among the survivors; shares from section 4).
over = [(lam, kept, s_kept > s_all) for lam, kept, s_kept, s_all in shares]
print("role-carrying heads over-represented among the survivors (lambda, heads kept, yes/no):", over)
if QUICK:
    # quick model: no head has a role (chapter 3), so finding 2 is not testable here
    assert not with_role, with_role
    print("finding 2 not testable in quick mode: no role-carrying head")
print(f"chapter done in {time.time() - T0:.0f} s")
