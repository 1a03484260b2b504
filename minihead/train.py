"""Training: batches, Adam with warm-up, periodic dev BLEU, early stopping, exact resume.

Determinism: the batch list is cut once (sorted by length), its order is shuffled per epoch with a
generator seeded by (seed, epoch), and dropout draws from one generator whose state is checkpointed;
so the same seed gives the same loss curve, and resuming from ``last.npz`` continues bit for bit.
The setting ``shards`` > 1 computes each step's batch as that many row shards in parallel processes
(:mod:`minihead.shards`): the same loss and gradients with the float32 sums in another order, so another
model than ``shards=1``, faster where there are cores to spare.
"""
import contextlib
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Optional

from tqdm.auto import tqdm

from . import backend, checkpoint, shards
from .data.vocab import SPECIALS, Vocab, batches, frequencies
from .errors import TrainingError, UsageError
from .evaluate import bleu
from .model import Config, init_params, loss_and_grads
from .optim import Adam, clip_grad_norm, noam_lr
from .translate import translate


@dataclass
class TrainConfig:
    max_tokens: int = 3000        # padded source + target tokens per batch
    warmup: int = 800
    lr: float = 3e-3              # peak learning rate, reached at step = warmup (then ~ step^-0.5)
    max_steps: int = 4000
    eval_every: int = 500         # steps between dev BLEU evaluations (and last.npz saves)
    patience: int = 3             # stop after this many evaluations without a better dev BLEU
    min_delta: float = 0.0        # ... better by more than this (BLEU points): the plateau rule, written once
    clip: float = 1.0
    seed: int = 1
    dev_bleu_sentences: int = 300  # dev BLEU on the first N dev sentences (greedy), for speed
    n_train: Optional[int] = None  # use only the first N training pairs (quick runs)
    shards: int = 1               # each batch's rows split over this many processes (minihead.shards); 1: no split

    def to_dict(self):
        """The settings as a dict; a setting added later (``shards``, ``min_delta``) is left out at its default, so
        the records and cache keys written before it existed (checkpoint metadata, from-scratch keys) stay valid."""
        return {k: v for k, v in asdict(self).items() if not (k in LATER_SETTINGS and v == LATER_SETTINGS[k])}


LATER_SETTINGS = {"shards": 1, "min_delta": 0.0}   # settings added after models were saved, with those models' values


CURVE_EVERY = 20   # steps between points of the training curve (running mean since the last evaluation)

PRESETS = {
    # for tests and CI: about two minutes on one core. The default recipe's shape, shrunk: 2 heads a layer, heads of
    # 32 dimensions, 3 encoder and 2 decoder layers, trained without dropout at twice the learning rate (without
    # dropout the syntactic heads grew in half the steps: the README's log of issue 18)
    "quick": (dict(n_enc_layers=3, n_dec_layers=2, n_heads=2, d_model=64, d_ff=128, dropout=0.0),
              dict(max_steps=1200, eval_every=300, n_train=10000, max_tokens=2500, warmup=250,
                   lr=1e-2, dev_bleu_sentences=150, patience=2)),
    # the recipe in which the head functions emerge on data_small (issue 18): heads as wide as the paper's (64),
    # 2 per layer, all 30k pairs; a +1 positional head (share 0.92, confidence 0.81) and an amod head by step 1,200
    "wide": (dict(n_enc_layers=3, n_dec_layers=3, n_heads=2, d_model=128, d_ff=256, dropout=0.1),
             dict(max_steps=1600, eval_every=400, max_tokens=2500, warmup=400, lr=4e-3, dev_bleu_sentences=150)),
    # the recipe of issue 18 after "wide": the same heads on an encoder-heavy model (6 encoder layers, 2 decoder
    # layers), so the decoder has fewer layers in which to meet the translation's needs itself and the encoder's
    # heads take them on: at 2,400 steps a +1 positional head and syntactic heads for >= 3 of the 4 relations in
    # 3 of 3 seeds, at one and at two BLAS threads (chapters/studies/emerge.json); 8-13 min per seed on one core
    "emerge": (dict(n_enc_layers=6, n_dec_layers=2, n_heads=2, d_model=128, d_ff=256, dropout=0.1),
               dict(max_steps=2400, eval_every=400, max_tokens=2500, warmup=400, lr=4e-3, dev_bleu_sentences=150)),
}
# the default (full-scale) model is the emerge recipe: the configuration in which the paper's head functions
# appear. The former default (6 + 6 layers x 4 heads of 32) was never shown to grow a head function on this
# language (issue 18's log); "default" and "emerge" name the same settings, so they train the same model.
PRESETS["default"] = PRESETS["emerge"]
# the paper's head count: the default model with its width split into 8 heads of 16 (the same matrix FLOPs, within a
# few percent of its step time: docs/bench/heads-cpu.json), trained to a plateau of dev BLEU on 500 dev sentences (an
# evaluation counts as a gain only 0.5 BLEU above the last one; 3 evaluations without a gain stop the run) instead of a
# fixed 2,400 steps (docs/experiments.md, "A recipe with the paper's head count"; the rule stops some seeds early)
PRESETS["heads8"] = (dict(PRESETS["default"][0], n_heads=8),
                     dict(PRESETS["default"][1], max_steps=12000, dev_bleu_sentences=500, patience=3, min_delta=0.5))
# the paper's head count at half its width: 8 heads of 32 at d_model 256 (the paper's heads are 64 wide at d_model 512),
# a candidate for heads8's successor (in heads8 the +1 job spread over several 16-wide heads; 32-wide heads gathered it
# in the 4-head pilot). About twice heads8's step time. Peak learning rate 2e-3: at the default's 4e-3 the wider model
# learns slowly (seed 1's dev BLEU 8.8 at step 800, against 32.4 at 2e-3). Its plateau rule is heads8's made sturdier
# against the half a point that 500-sentence dev BLEU moves between evaluations: a gain counts above 0.25 BLEU, 4
# evaluations without one stop the run (docs/experiments.md)
PRESETS["heads8x32"] = (dict(PRESETS["default"][0], n_heads=8, d_model=256, d_ff=512),
                        dict(PRESETS["default"][1], lr=2e-3, max_steps=12000, dev_bleu_sentences=500, patience=4,
                             min_delta=0.25))
# the default until issue 18, kept for the benchmark figures measured on it (README) and for comparison
PRESETS["narrow"] = (dict(n_enc_layers=6, n_dec_layers=6, n_heads=4, d_model=128, d_ff=256, dropout=0.1),
                     dict(max_steps=2400, eval_every=400, max_tokens=3000, warmup=600, lr=4e-3))


def preset(name, vocab_size, **overrides):
    """(model Config, TrainConfig) of a named preset; overrides go to whichever has the field. Unknown
    names and settings raise UsageError (a ValueError); values are checked by :func:`check_settings`."""
    if name not in PRESETS:
        raise UsageError(f"unknown configuration {name!r}; choose one of {', '.join(PRESETS)}")
    m, t = PRESETS[name]
    cfg, tcfg = Config(vocab_size=vocab_size, **m), TrainConfig(**t)
    for k, v in overrides.items():
        if hasattr(tcfg, k):
            tcfg = replace(tcfg, **{k: v})
        elif hasattr(cfg, k):
            cfg = replace(cfg, **{k: v})
        else:
            raise UsageError(f"unknown setting {k!r}; settings are {', '.join(setting_names())}")
    return cfg, tcfg


def preset_settings(name, **overrides):
    """The named preset's settings as written in :data:`PRESETS` ({"model": ..., "train": ...}), with
    ``overrides`` applied to whichever :func:`preset` applies them to (names checked by it): the plain record of
    what determines a model, for the provenance of a study."""
    _, tcfg = preset(name, 1, **overrides)
    m, t = (dict(d) for d in PRESETS[name])
    for k, v in overrides.items():
        (t if hasattr(tcfg, k) else m)[k] = v
    return {"model": m, "train": t}


def setting_names():
    """Every field a ``--set KEY=VALUE`` may name: the TrainConfig's, then the model Config's."""
    return [f.name for f in fields(TrainConfig)] + [f.name for f in fields(Config) if f.name != "vocab_size"]


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


# name -> (test, what it must be); checked by check_settings before any work
_RULES = {
    "max_tokens": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "warmup": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "lr": (lambda v: _is_number(v) and v > 0, "a finite number > 0"),
    "max_steps": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "eval_every": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "patience": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "min_delta": (lambda v: _is_number(v) and v >= 0, "a finite number >= 0"),
    "clip": (lambda v: _is_number(v) and v >= 0, "a finite number >= 0 (0: no clipping)"),
    "seed": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "dev_bleu_sentences": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "n_train": (lambda v: v is None or (_is_int(v) and v >= 1), "an integer >= 1 (or none: all pairs)"),
    "shards": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "vocab_size": (lambda v: _is_int(v) and v > len(SPECIALS), f"an integer > {len(SPECIALS)}"),
    "n_enc_layers": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "n_dec_layers": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "n_heads": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "d_model": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "d_ff": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "dropout": (lambda v: _is_number(v) and 0 <= v < 1, "a number in [0, 1)"),
    "attn_dropout": (lambda v: _is_number(v) and 0 <= v < 1, "a number in [0, 1)"),
    "label_smoothing": (lambda v: _is_number(v) and 0 <= v < 1, "a number in [0, 1)"),
    "shared_embeddings": (lambda v: isinstance(v, bool), "true or false"),
    "pre_norm": (lambda v: isinstance(v, bool), "true or false"),
    "ln_eps": (lambda v: _is_number(v) and v > 0, "a finite number > 0"),
    "dtype": (lambda v: v in ("float32", "float64"), "float32 or float64"),
}


def check_settings(cfg, tcfg):
    """Raise UsageError naming the first setting of ``cfg`` / ``tcfg`` of the wrong type or out of range
    (``setting lr=nan: must be a finite number > 0``), or a d_model the heads do not divide."""
    for k, v in {**cfg.to_dict(), **asdict(tcfg)}.items():
        test, what = _RULES[k]
        if not test(v) and k == "vocab_size":   # never set by the user: it is the training data's vocabulary
            raise UsageError(f"the training data has {v - len(SPECIALS)} distinct words; a model needs at least one "
                             f"(is the corpus empty?)")
        if not test(v):
            raise UsageError(f"setting {k}={v!r}: must be {what}")
    if cfg.d_model % cfg.n_heads:
        raise UsageError(f"setting d_model={cfg.d_model}: must be divisible by n_heads={cfg.n_heads}")


@dataclass
class Corpus:
    """Token lists of the splits and the joint vocabulary built on the training pairs."""
    vocab: Vocab
    train_src: list
    train_tgt: list
    dev_src: list
    dev_tgt: list
    src_freq: dict = field(default_factory=dict)

    @classmethod
    def build(cls, train_pairs, dev_pairs, n_train=None, vocab=None):
        train_pairs = train_pairs[:n_train] if n_train else train_pairs
        src, tgt = [s for s, _ in train_pairs], [t for _, t in train_pairs]
        vocab = vocab or Vocab.build(src + tgt)
        return cls(vocab, src, tgt, [s for s, _ in dev_pairs], [t for _, t in dev_pairs], frequencies(src))


@dataclass
class TrainResult:
    params: dict
    cfg: Config
    vocab: Vocab
    history: list
    curve: list           # [step, running mean training loss since the last evaluation]
    best_path: str
    last_path: str
    best_bleu: float


def _meta(tcfg, step, epoch, batch_pos, history, best_bleu, bad_evals, loss_acc=0.0, n_acc=0, curve=(), plateau=None):
    return {"train": tcfg.to_dict(), "step": step, "epoch": epoch, "batch_pos": batch_pos,
            "history": history, "best_bleu": best_bleu, "bad_evals": bad_evals,
            "loss_acc": loss_acc, "n_acc": n_acc, "curve": list(curve),
            **({"plateau_bleu": plateau} if plateau is not None and plateau != best_bleu else {})}


def dev_bleu(params, cfg, corpus, n, gates=None):
    hyps = translate(params, cfg, corpus.vocab, corpus.dev_src[:n], gates=gates)
    return bleu(hyps, corpus.dev_tgt[:n])


def train(corpus, cfg, tcfg, out_dir, resume=False, progress=True, stop_after=None, log=print, gates=None,
          save_every=None):
    """Train (or resume from ``out_dir/last.npz``); writes ``last.npz`` every ``eval_every`` steps and
    ``best.npz`` on each new best dev BLEU. ``save_every``: also write ``last.npz`` every that many steps
    without evaluating (a run with one dev evaluation at its end can still resume). ``stop_after`` ends this
    call after that many steps (to simulate an interruption). ``gates``: fixed per-head gates
    ({"enc": (L, H), ...}, e.g. 0/1 masks of a pruned configuration trained from scratch), used in training
    and in dev BLEU. Returns a TrainResult.

    Before any step: the settings are checked (:func:`check_settings`), the corpus must have training and
    dev pairs, ``out_dir`` is locked against other writers (:func:`checkpoint.run_lock`), and a resume must
    use the saved run's settings (only ``max_steps`` may change). A non-finite loss or gradient norm stops
    training with a TrainingError; that step is not applied and nothing is saved for it."""
    check_settings(cfg, tcfg)
    if not corpus.train_src or not corpus.dev_src:
        raise UsageError(f"{out_dir}: the corpus has {len(corpus.train_src)} training and {len(corpus.dev_src)} "
                         f"dev pairs; training needs both")
    run = _Run(corpus, cfg, tcfg, out_dir, resume, progress, stop_after, log, gates, save_every)
    with checkpoint.run_lock(out_dir), contextlib.ExitStack() as stack:   # the stack stops shard workers
        return _train_loop(run, stack)


@dataclass(frozen=True)
class _Run:
    """One call of :func:`train`: its arguments, as :func:`_train_loop` reads them."""
    corpus: object
    cfg: Config
    tcfg: object
    out_dir: str
    resume: bool
    progress: bool
    stop_after: Optional[int]
    log: object
    gates: Optional[dict]
    save_every: Optional[int]


def _step_fn(params, cfg, tcfg, gates, stack, out_dir=None):
    """The loss-and-gradients function of a training step: the model's, or with ``shards`` > 1 the sharded
    step with its worker processes (stopped when ``stack``, an ExitStack, closes; a worker's death is an error
    naming ``out_dir``, the run folder, and how to resume it)."""
    if tcfg.shards <= 1:
        return lambda b, gen: loss_and_grads(params, cfg, b, gates=gates, rng=gen)
    workers = shards.workers_for(params, cfg, tcfg.shards, run_dir=out_dir)
    if workers is not None:
        stack.enter_context(workers)
    return lambda b, gen: shards.loss_and_grads(params, cfg, b, tcfg.shards, gates=gates, rng=gen, workers=workers)


RESUMABLE_CHANGES = ("max_steps",)   # the one setting a resume may change: train on for longer (or stop sooner)


def check_resume(ck, cfg, tcfg, vocab=None):
    """Raise UsageError naming every model or training setting of ``cfg`` / ``tcfg`` that differs from the
    run saved in checkpoint ``ck`` (only ``max_steps`` may change), or, given ``vocab`` (the data's), a
    vocabulary that differs from the saved one in any word, not only in size."""
    if vocab is not None:
        problem = checkpoint.vocab_difference(ck.vocab, vocab)
        if problem:
            raise UsageError(f"{ck.path}: cannot resume on other data: {problem}; resume on the data the run was "
                             f"trained on or train into a new folder")
    saved = {**ck.cfg.to_dict(), **LATER_SETTINGS, **(ck.meta.get("train") or {})}
    diff = [f"{k} {saved[k]!r} (saved) vs {v!r} (now)" for k, v in {**cfg.to_dict(), **asdict(tcfg)}.items()
            if k not in RESUMABLE_CHANGES and k in saved and saved[k] != v]
    if diff:
        raise UsageError(f"{ck.path}: cannot resume with settings that differ from the saved run's: "
                         f"{', '.join(diff)}; resume with the saved settings or train into a new folder")


def _train_loop(run, stack):
    corpus, cfg, tcfg, out_dir, resume, progress = run.corpus, run.cfg, run.tcfg, run.out_dir, run.resume, run.progress
    stop_after, log, gates, save_every = run.stop_after, run.log, run.gates, run.save_every
    last_path, best_path = os.path.join(out_dir, "last.npz"), os.path.join(out_dir, "best.npz")
    vocab = corpus.vocab
    src_ids = [vocab.encode(s) for s in corpus.train_src]
    tgt_ids = [vocab.encode(t) for t in corpus.train_tgt]
    all_batches = list(batches(src_ids, tgt_ids, tcfg.max_tokens))
    gen = backend.rng(tcfg.seed)
    if resume:
        ck = checkpoint.load(last_path)
        check_resume(ck, cfg, tcfg, vocab)
        params, m = ck.params, ck.meta
        opt = Adam(params)
        ck.restore_optimizer(opt)
        ck.restore_rng(gen)
        step, epoch, pos = m["step"], m["epoch"], m["batch_pos"]
        history, best, bad = m["history"], m["best_bleu"], m["bad_evals"]
        plateau = m.get("plateau_bleu", best if history else None)
        loss_acc, n_acc, curve = m["loss_acc"], m["n_acc"], m["curve"]
    else:
        params = init_params(cfg, seed=tcfg.seed)
        opt = Adam(params)
        step, epoch, pos, history, best, bad = 0, 0, 0, [], -1.0, 0
        plateau = None        # the dev BLEU the plateau rule last counted as a gain (none before the first)
        loss_acc, n_acc, curve = 0.0, 0, []
    step_fn = _step_fn(params, cfg, tcfg, gates, stack, out_dir)
    order = backend.rng((tcfg.seed, epoch)).permutation(len(all_batches))
    lr_factor = tcfg.lr * math.sqrt(cfg.d_model * tcfg.warmup)   # noam factor whose peak is tcfg.lr
    bar = tqdm(total=tcfg.max_steps, initial=step, disable=not progress, desc="train", unit="step")
    t0, tok, run_steps = time.time(), 0, 0
    stopped = bad >= tcfg.patience   # a run that stopped early stays stopped when resumed
    while step < tcfg.max_steps and not stopped:
        if pos >= len(order):
            epoch, pos = epoch + 1, 0
            order = backend.rng((tcfg.seed, epoch)).permutation(len(all_batches))
        b = all_batches[int(order[pos])]
        pos += 1
        loss, grads, _ = step_fn(b, gen)
        norm = clip_grad_norm(grads, tcfg.clip)
        if not (math.isfinite(float(loss)) and math.isfinite(norm)):
            bar.close()
            saved = f"the last checkpoint is {last_path}" if os.path.exists(last_path) else "no checkpoint was saved"
            raise TrainingError(f"{out_dir}: training diverged at step {step + 1}: loss {float(loss)}, gradient "
                                f"norm {norm} (lr {tcfg.lr:g}); stopped, {saved}")
        step += 1
        opt.step(params, grads, noam_lr(step, cfg.d_model, tcfg.warmup, lr_factor))
        loss_acc, n_acc, tok, run_steps = loss_acc + float(loss), n_acc + 1, tok + b.n_tokens, run_steps + 1
        bar.update(1)
        if step % CURVE_EVERY == 0:
            curve.append([step, loss_acc / n_acc])
            bar.set_postfix(loss=f"{loss_acc / n_acc:.3f}", tok_s=f"{tok / (time.time() - t0):.0f}")
        evaluated = step % tcfg.eval_every == 0 or step == tcfg.max_steps
        if evaluated:
            score = dev_bleu(params, cfg, corpus, tcfg.dev_bleu_sentences, gates)
            history.append({"step": step, "epoch": epoch, "loss": loss_acc / n_acc, "dev_bleu": score})
            loss_acc, n_acc = 0.0, 0
            bar.write(f"step {step}: train loss {history[-1]['loss']:.3f}, dev BLEU {score:.2f}") if progress else None
            # the plateau rule: a gain counts only above the last counted gain + min_delta; best.npz is any new best
            gain = plateau is None or score > plateau + tcfg.min_delta
            plateau, bad = (score, 0) if gain else (plateau, bad + 1)
            if score > best:
                best = score
                checkpoint.save(best_path, params, cfg, vocab,
                                meta=_meta(tcfg, step, epoch, pos, history, best, bad, plateau=plateau))
            checkpoint.save(last_path, params, cfg, vocab, opt, gen,
                            _meta(tcfg, step, epoch, pos, history, best, bad, curve=curve, plateau=plateau))
            if bad >= tcfg.patience:
                log(f"early stop at step {step}: no dev BLEU gain"
                    + (f" above {tcfg.min_delta:g}" if tcfg.min_delta else "") + f" in {bad} evaluations") if progress else None
                stopped = True
        interrupted = stop_after is not None and run_steps >= stop_after
        if interrupted or (save_every and step % save_every == 0 and not evaluated):
            checkpoint.save(last_path, params, cfg, vocab, opt, gen,
                            _meta(tcfg, step, epoch, pos, history, best, bad, loss_acc, n_acc, curve, plateau))
        if interrupted:
            break
    bar.close()
    return TrainResult(params, cfg, vocab, history, curve, best_path, last_path, best)
