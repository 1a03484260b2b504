# %% [markdown]
# # Chapter 7: Real language: Multi30k EN-DE, judged on UD English EWT trees
#
# The earlier chapters use `data_small/`, a synthetic pair whose syntax we know exactly. Here the same code runs on real
# language: a model trained on **Multi30k** English-German image captions (Elliott et al. 2016), segmented with a BPE
# model learned on it (`minihead/data/bpe.py`, Sennrich et al. 2016), and analysed on the gold dependency trees of the
# **UD English Web Treebank** dev set. Subwords are mapped back to words as the paper does: attention *to* a word sums
# over its pieces, attention *from* a word is its first piece's row.
#
# The data is not part of the project (licences): this chapter looks for it in `../shared/realdata/` (or the folder in
# the environment variable `MINIHEAD_REALDATA`) with the layout `multi30k/{train,val,test_2016_flickr}.{en,de}` and
# `ud_en_ewt/dev.conllu`. Multi30k: github.com/multi30k/dataset (`data/task1/raw`, unzip); UD EWT:
# github.com/UniversalDependencies/UD_English-EWT (`en_ewt-ud-dev.conllu`). Without it the chapter says so and skips.
#
# Two caveats to read the numbers by. Multi30k captions are short and simple (few objects or adverbs), while EWT is web
# text with longer sentences and unknown words; and the quick model is small and trained for minutes.

# %%
import os
import sys
sys.path.insert(0, os.path.abspath(".."))   # run from chapters/
QUICK = os.environ.get("MINIHEAD_QUICK", "0") == "1"

# %%
import pathlib
REAL = pathlib.Path(os.environ.get("MINIHEAD_REALDATA", pathlib.Path("..").resolve().parent / "shared" / "realdata"))
M30K, EWT = REAL / "multi30k", REAL / "ud_en_ewt" / "dev.conllu"
HAVE_DATA = all((M30K / f).exists() for f in ("train.en", "train.de", "val.en", "val.de",
                                               "test_2016_flickr.en", "test_2016_flickr.de")) and EWT.exists()
if not HAVE_DATA:
    print(f"Real data not found under {REAL}: this chapter skips its analysis.\n"
          "Get Multi30k task 1 (github.com/multi30k/dataset, data/task1/raw) and UD English EWT "
          "(github.com/UniversalDependencies/UD_English-EWT) and set MINIHEAD_REALDATA to their folder.")

# %% [markdown]
# ## 1. Train (or load) the model
#
# `load_real_study` tokenizes the raw text (case kept), learns BPE on the training pairs, trains the preset and caches
# everything in `runs/real-*`. Quick mode: the `quick` preset (3+2 layers x 2 heads of 32, d_model 64, 10k pairs, 4,000
# merges, 1,200 steps); full mode: the recipe in which the head functions form on data_small, `emerge` (6 encoder + 2 decoder
# layers, 2 heads of 64 dimensions, d_model 128, 2,400 steps, all 29k pairs, 8,000 merges).

# %%
if HAVE_DATA:
    from minihead.study import load_real_study
    study = load_real_study(str(M30K / "train.en"), str(M30K / "train.de"), str(M30K / "val.en"), str(M30K / "val.de"),
                            str(M30K / "test_2016_flickr.en"), str(M30K / "test_2016_flickr.de"),
                            name="quick" if QUICK else "emerge")
    cfg = study.cfg
    print(f"{study.name}: vocabulary {len(study.vocab)} BPE pieces, {len(study.corpus.train_src)} training pairs")
    for h in study.history:
        print(f"  step {h['step']:5d}  train loss {h['loss']:.3f}  dev BLEU {h['dev_bleu']:.2f}")

# %%
if HAVE_DATA:
    from minihead.evaluate import score, text
    from minihead.translate import translate
    n_test = 300 if QUICK else 1000
    src, ref = study.splits["test"][0][:n_test], study.splits["test"][1][:n_test]
    hyp = translate(study.params, cfg, study.vocab, src, beam=1 if QUICK else 4)
    s_test = score(hyp, ref)
    print(f"test_2016_flickr ({n_test} sentences): BLEU {s_test['bleu']:.2f}, chrF {s_test['chrf']:.2f}\n  {s_test['bleu_signature']}")
    for x, r, h in list(zip(src, ref, hyp))[:3]:
        print(f"\nsrc: {text(x)}\nref: {text(r)}\nhyp: {text(h)}")

# %% [markdown]
# ## 2. Head roles on EWT trees
#
# The same `minihead.analysis.head_roles` as chapter 3, with the BPE model: positional shares with confidence, the
# Table-1-shaped table beside the paper's numbers, and the rare-word table (rarity by the model's training frequencies
# of source *words*).

# %%
if HAVE_DATA:
    from minihead.analysis import format_positional, format_rare, format_table, head_roles, plot_scores
    from minihead.data.conllu_io import read_conllu
    trees = read_conllu(str(EWT))[:400 if QUICK else None]
    rep = head_roles(study.params, cfg, study.vocab, trees, study.src_word_freq, bpe=study.bpe)
    print(f"{len(trees)} EWT dev sentences, {rep.n_words} words ({rep.n_unknown} unknown to the model)\n")
    print(format_positional(rep))
    print()
    print(format_table(rep))
    print()
    print(format_rare(rep))

# %%
if HAVE_DATA:
    import matplotlib.pyplot as plt
    plot_scores(rep)
    plt.show()

# %% [markdown]
# ## 3. Importance of the encoder heads on Multi30k
#
# Head relevance (LRP, the paper's z-rule per prediction) and confidence of the encoder self-attention heads on the
# first validation pairs, with the roles above: are the important heads the specialised ones here too? As in chapter
# 2, the shares are magnitude shares $|r_h| / \sum_{h'} |r_{h'}|$ per prediction (`normalise="abs"`): the signed
# z-rule shares of a layer nearly cancel, so they cannot say which heads carry the relevance.

# %%
if HAVE_DATA:
    from minihead import findings, importance
    from minihead.data.vocab import batches
    v = study.vocab
    n_rel = 150 if QUICK else 300       # per prediction: one relevance pass per target position
    dsrc, dtgt = study.splits["dev"][0][:n_rel], study.splits["dev"][1][:n_rel]
    bs = list(batches([v.encode(s) for s in dsrc], [v.encode(t) for t in dtgt], 3000))
    rel = importance.head_relevance(study.params, cfg, bs, normalise="abs")["enc"]    # (L, H) magnitude shares
    conf = importance.head_confidence(study.params, cfg, bs)["enc"]
    tq = importance.top_quarter_share(rel)
    print("top-quarter relevance (magnitude) share per encoder layer:", [round(float(t), 2) for t in tq],
          f"(uniform {findings.few_heads(tq, cfg.n_heads).uniform:.2f})")
    print(f"Spearman relevance ~ confidence: {importance.rank_agreement(rel, conf):.2f}")
    importance.plot_importance(rel, conf, title="encoder heads, Multi30k val")
    plt.show()

# %% [markdown]
# ## Checks
#
# The verdicts below use the criteria of `minihead/findings.py`, as on data_small. On real language there is no
# study over seeds yet (training one model per seed at a scale where heads could form costs hours on 2 cores), so,
# by the rule of the other chapters, **no finding is asserted here**: each is printed for this one model, which is an
# anecdote, not a claim. The full-mode model is the `emerge` recipe that grows positional and syntactic heads on
# data_small in every seed; whether it does on Multi30k is what the cell below prints. If it does not, one reading
# is that English captions into German give the encoder little that the decoder cannot fetch itself (the reading
# the control language of data_small supports); the paper's heads were found on WMT and OpenSubtitles EN-RU, with
# millions of pairs.
# Only that training improved dev BLEU is asserted.

# %%
if HAVE_DATA:
    from minihead import findings
    assert study.history[-1]["dev_bleu"] > study.history[0]["dev_bleu"], "training improved dev BLEU"
    v_pos, v_syn, v_rare = findings.positional(rep), findings.syntactic(rep), findings.rare_word(rep)
    v_few = findings.few_heads(tq, cfg.n_heads)
    print(f"one model, {'quick' if QUICK else 'full'} scale, EWT dev trees (printed, not asserted):")
    for name, v in (("positional", v_pos), ("syntactic", v_syn), ("rare_word", v_rare), ("few_heads", v_few)):
        print(f"  {findings.what(name)}: {v.status}{' (' + v.reason + ')' if v.reason else ''}; {v.text()}")
    print("  best margin per relation (points):", ", ".join(f"{r} {d} {100 * m:+.1f}" for r, d, m in v_syn.best_margins))
else:
    print("skipped: no real data")

# %% [markdown]
# ## Exercises
#
# Each solution is a function of `chapters/solutions/07_solutions.py`, runnable from the repository root
# (`python chapters/solutions/07_solutions.py exercise_K`) and checked by `tests/test_solutions.py`; it
# ends with asserts on its result.
#
# 1. **BPE round trip.** Learn a few merges with `BPE.learn` on a handful of captions, segment a sentence with unseen words, and check `unsegment` and `piece_to_word`.
#    - *Hint:* Frequent words stay whole; unseen ones split into pieces ending in `@@`.
#    - Solution: `solutions/07_solutions.py`, `exercise_1`.
# 2. **Pieces to words.** Check `roles.aggregate_attention` against $F\,\mathrm{attn}\,A$ built by hand, for the first-piece and the mean readout.
#    - *Hint:* $A$ is pieces x words (0/1), $F$ selects each word's first piece or averages its pieces; row totals are kept.
#    - Solution: `solutions/07_solutions.py`, `exercise_2`.
# 3. **Trees in and out.** Write two hand-made trees with `write_conllu`, read them back with `read_conllu`, and list their nsubj and obj arcs with `Sentence.arcs`.
#    - *Hint:* Heads are 1-based in the file (0 = root); `arcs` gives 0-based (dependent, head) pairs.
#    - Solution: `solutions/07_solutions.py`, `exercise_3`.
