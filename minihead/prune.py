"""Pruning attention heads with hard-concrete gates (Voita et al. 2019, sec. 6), a cached lambda sweep
(Figures 7 and 8) and the same head configurations trained from scratch (Table 2).

Every head of the chosen attention types gets one gate g_lh = HardConcrete(log_alpha_lh) that multiplies
its output before W^O. Starting from a converged model with every gate open (log_alpha = LOG_ALPHA_OPEN),
training continues on

    loss = cross-entropy(gated model) + lambda * L_C,   L_C = sum_heads P(g_lh != 0)      (Voita et al. eq. 5-6)

with a fresh gate sample per step (one u per head, shared by the batch, as in the official code), the
gradient of the sample written by hand (``HardConcrete.sample_backward``) and the penalty's by
``penalty_backward``. log_alpha has its own Adam with a large learning rate: Adam moves a parameter by about
lr per step, and a gate is only pruned once log_alpha has travelled from +3 to below 0 (binary readout) and is
settled only below -3.74 (see tests/test_gates.py), so lr 0.1 lets a gate close within ~30-70 steps. The model's
weights train with a second Adam at a small constant rate. ``lr_gates=None`` is the official code's joint
optimiser instead (the gates at the weights' rate). Measured on the quick model (lambda 0.01, 1250-token
batches, one BLAS thread): the joint optimiser at lr 1e-3 left every log_alpha within 2.88-3.08 of its start
after the 600-step cap (no gate settled, all 12 heads kept, BLEU 43.8 on 200 test sentences), while gates at
lr 0.2 settled after 210 steps with 5 heads kept (BLEU 41.6, 41.9 before pruning): the official code's joint
schedule needs thousands of steps that a CPU reproduction cannot spend, which is why the separate rate is kept.

Training runs until the gates settle (sec. 6.1: "gates are either almost completely closed or completely
open"): every ``log_every`` steps the share of gates with max(P(g = 0), P(g = 1)) > 0.95 is measured and the
run stops once it reaches ``settle`` (0.9), or at ``steps`` (the cap); the result records whether it settled.

Which weights train: encoder-only pruning (kinds = ("enc",)) freezes the decoder, as the paper does; with
shared embeddings (one matrix for source, target and the output projection) the embedding is frozen too, since
it is part of the decoder. Only encoder layers and the encoder's final LayerNorm (and a separate source
embedding, if any) then change. Pruning any decoder attention type trains every weight.

At test time each gate is 0 or 1, whichever of P(g = 0) and P(g = 1) is larger (the paper, sec. 6.1; the
default ``readout="binary"``, used for "heads kept" and BLEU); the official code's continuous gate
g = clip(sigmoid(log_alpha)(zeta - gamma) + gamma, 0, 1) (Louizos eq. 13; a head kept iff g > 0, BLEU scored
with the fractional gates) is reported beside it (``readout="continuous"``).
"""
import hashlib
import inspect
import os
from dataclasses import asdict, dataclass, replace

from . import backend, checkpoint
from .cache import cached_json, key_hash   # the stage cache (minihead/cache.py)
from .backend import xp
from .data.vocab import batches
from .errors import MiniheadError
from .evaluate import bleu
from .gates import (
    LOG_ALPHA_OPEN,
    HardConcrete,
    init_log_alpha,
    l0_total,
    l0_total_backward,
    settled_share,
)
from .model import GATE_KINDS, loss_and_grads
from .optim import Adam, clip_grad_norm

KIND_SETS = {"enc": ("enc",), "all": GATE_KINDS}   # the CLI's --kinds
CACHE_VERSION = 3                                  # bump when the computation behind a cached file changes
SCRATCH_SAVE_EVERY = 200                           # from-scratch training: steps between resumable saves
READOUTS = ("binary", "continuous")                # test-time gates: the paper's / the official code's
SETTLED_AT = 0.95                                  # a gate is settled when max(P(g=0), P(g=1)) > this


class PruneError(MiniheadError, ValueError):
    """Unknown attention kinds, bad pruning settings, or a cache file that does not parse."""


@dataclass
class PruneResult:
    log_alpha: dict     # kind -> (L, H) final gate parameters
    params: dict        # the model's weights after pruning (a copy; the input is not changed)
    gates: dict         # kind -> (L, H) test-time gates, paper's binary readout (0 or 1)
    retained: dict      # kind -> (L, H) bool host array, binary gate = 1
    history: list       # per log interval: step, mean cross-entropy, L_C, open gates per kind, settled share
    trained: list       # names of the weights that were updated
    gates_continuous: dict = None     # kind -> (L, H) the official code's continuous gates (Louizos eq. 13)
    retained_continuous: dict = None  # kind -> (L, H) bool, continuous gate > 0
    settled_share: float = 0.0        # share of gates with max(P(g=0), P(g=1)) > SETTLED_AT at the end
    steps_used: int = 0               # steps trained (the run stops once settled_share >= settle)
    settled: bool = False             # whether settled_share reached ``settle`` within the step cap


# --------------------------------------------------------------------------- settings
def check_kinds(kinds):
    """kinds as a tuple in GATE_KINDS order; "enc" / "all" (the CLI's names) are accepted too."""
    if isinstance(kinds, str):
        if kinds not in KIND_SETS:
            raise PruneError(f"kinds {kinds!r}: choose one of {', '.join(KIND_SETS)} or a tuple of {GATE_KINDS}")
        kinds = KIND_SETS[kinds]
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in GATE_KINDS]
    if bad or not kinds or len(set(kinds)) != len(kinds):
        raise PruneError(f"kinds {kinds!r}: need distinct attention types out of {GATE_KINDS}")
    return tuple(k for k in GATE_KINDS if k in kinds)


def kinds_tag(kinds):
    """'enc', 'all' or the kinds joined with '+' (file names)."""
    kinds = check_kinds(kinds)
    for tag, ks in KIND_SETS.items():
        if ks == kinds:
            return tag
    return "+".join(kinds)


def trainable_names(params, cfg, kinds, train_params="auto"):
    """Weights updated while pruning. "auto": "encoder" if only encoder heads are gated, else "all".
    "encoder": encoder layers, the encoder's final LayerNorm, and the source embedding only if it is not
    shared with the decoder (decoder frozen, Voita et al. sec. 6.1); "all": every weight; "none": only gates."""
    kinds = check_kinds(kinds)
    if train_params == "auto":
        train_params = "encoder" if kinds == ("enc",) else "all"
    if train_params == "all":
        return sorted(params)
    if train_params == "none":
        return []
    if train_params == "encoder":
        # "enc0.self.Wq", "enc_ln.g", ...; no decoder name starts with "enc"
        return sorted(k for k in params if k.startswith("enc") or (k == "src_emb" and not cfg.shared_embeddings))
    raise PruneError(f"train_params {train_params!r}: choose auto, encoder, all or none")


# --------------------------------------------------------------------------- pruning
def deterministic_gates(log_alpha, hc=None, readout="binary"):
    """Test-time gates and retained masks from log_alpha (dict kind -> (L, H)): (gates, retained).

    ``readout="binary"`` (the paper, sec. 6.1): g = 1 where P(g = 1) >= P(g = 0), else 0
    (:meth:`HardConcrete.binary_gate`); ``"continuous"`` (the official code): g = clip(sigmoid(log_alpha)
    (zeta - gamma) + gamma, 0, 1) (Louizos eq. 13). A head is retained iff its gate is > 0."""
    hc = hc or HardConcrete()
    if readout not in READOUTS:
        raise PruneError(f"readout {readout!r}: choose one of {', '.join(READOUTS)}")
    read = hc.binary_gate if readout == "binary" else hc.test_gate
    gates = {k: read(la) for k, la in log_alpha.items()}                            # kind -> (L, H)
    retained = {k: backend.to_host(g) > 0 for k, g in gates.items()}               # kind -> (L, H) bool
    return gates, retained


def gated_loss_and_grads(params, cfg, batch, log_alpha, u, lam, reduction="sum", hc=None, rng=None):
    """The pruning objective J = CE(model with gates g) + lambda * L_C and its gradients, for one batch.

    g_k = sample_forward(log_alpha_k, u_k) per gated kind (Louizos eq. 9); L_C = l0_total of
    P(g != 0) = sigmoid(log_alpha - beta log(-gamma / zeta)) over every gated layer of every kind, stacked as
    rows of one (sum L, H) array (Voita et al. eq. 6 with reduction "sum"). Chain rule:
    dJ/dlog_alpha = sample_backward(dCE/dg) + lambda * dL_C/dp * p (1 - p).
    ``rng``: dropout generator (None: no dropout). Returns (ce, l0, weight grads, kind -> dJ/dlog_alpha (L, H))."""
    hc = hc or HardConcrete()
    kinds = list(log_alpha)
    gates, gcache = {}, {}
    for k in kinds:
        gates[k], gcache[k] = hc.sample_forward(log_alpha[k], u[k])                  # (L, H)
    ce, grads, info = loss_and_grads(params, cfg, batch, gates=gates, rng=rng)
    p, pcache = hc.penalty_forward(xp.concatenate([log_alpha[k] for k in kinds]))  # (sum L, H) P(g != 0)
    l0, tcache = l0_total(p, reduction)                                            # ()
    dp = l0_total_backward(lam, tcache)                                            # (sum L, H) lambda dL_C/dp
    dpen = hc.penalty_backward(dp, pcache)                                         # (sum L, H)
    dla, row = {}, 0
    for k in kinds:
        L = log_alpha[k].shape[0]
        dla[k] = hc.sample_backward(info["dgates"][k], gcache[k]) + dpen[row:row + L]  # (L, H)
        row += L
    return ce, l0, grads, dla


def prune(params, cfg, corpus, kinds=("enc",), lam=0.01, steps=300, *, lr_gates=0.1, lr_params=1e-3,
          reduction="sum", max_tokens=2500, seed=0, clip=1.0, log_every=25, train_params="auto",
          init=LOG_ALPHA_OPEN, hc=None, settle=0.9, progress=False, on_step=None):
    """Continue training a converged model with hard-concrete gates on the heads of ``kinds``, until the gates
    settle or for at most ``steps`` steps.

    Each step: u ~ U(0, 1) per head from a host generator seeded by (seed, 1); gates g = sample_forward;
    cross-entropy and its gradients (weights and gates) by ``model.loss_and_grads`` with dropout drawn from
    a generator seeded by (seed, 2); d log_alpha = sample_backward(dg) + lambda * dL_C/dlog_alpha with
    L_C = l0_total(P(g != 0), reduction) ("sum": the paper's eq. 6; "layer_mean": the official code's);
    log_alpha takes an Adam step at ``lr_gates`` (None: at ``lr_params``, the official code's joint optimiser), the weights named by :func:`trainable_names` an Adam step
    at the constant ``lr_params`` after clipping their gradient norm to ``clip``. Batches of ``max_tokens``
    are visited in an order shuffled per epoch by (seed, epoch). Every ``log_every`` steps the settled share
    (gates with max(P(g = 0), P(g = 1)) > SETTLED_AT, :func:`minihead.gates.settled_share`) is logged; with
    ``settle`` (a share in (0, 1]; None: always run ``steps``) the run stops at the first logged step where it
    is >= ``settle``. ``on_step(step, params, log_alpha)``, if given, is called after every step (the step-matched
    reference evaluates the run there). Same seed, same numbers. Returns a :class:`PruneResult` (binary and
    continuous readouts)."""
    kinds = check_kinds(kinds)
    joint = lr_gates is None
    if (steps < 1 or lam < 0 or lr_params < 0 or (not joint and lr_gates <= 0) or (joint and lr_params <= 0)
            or log_every < 1 or (settle is not None and not 0 < settle <= 1)):
        raise PruneError(f"prune: need steps >= 1, lambda >= 0, lr_gates > 0 (or None with lr_params > 0), "
                         f"lr_params >= 0, log_every >= 1, settle in (0, 1] or None (got steps={steps}, lam={lam}, "
                         f"lr_gates={lr_gates}, lr_params={lr_params}, log_every={log_every}, settle={settle})")
    lr_g = lr_params if joint else lr_gates
    hc = hc or HardConcrete()
    params = {k: v.copy() for k, v in params.items()}                # the caller's model stays as it was
    shapes = {k: (cfg.n_layers(k), cfg.n_heads) for k in kinds}
    log_alpha = {k: init_log_alpha(shapes[k], init, dtype=cfg.dtype) for k in kinds}  # kind -> (L, H)
    names = trainable_names(params, cfg, kinds, train_params)
    opt_gates = Adam(log_alpha)
    opt_model = Adam(params, names=names) if names and lr_params > 0 else None
    gen_u, gen_drop = backend.rng((seed, 1)), backend.rng((seed, 2))
    vocab = corpus.vocab
    src_ids = [vocab.encode(s) for s in corpus.train_src]
    tgt_ids = [vocab.encode(t) for t in corpus.train_tgt]
    all_batches = list(batches(src_ids, tgt_ids, max_tokens))

    history, ce_acc, n_acc, epoch, pos = [], 0.0, 0, 0, 0
    order = backend.rng((seed, epoch)).permutation(len(all_batches))
    for step in range(1, steps + 1):
        if pos >= len(order):
            epoch, pos = epoch + 1, 0
            order = backend.rng((seed, epoch)).permutation(len(all_batches))
        batch = all_batches[int(order[pos])]
        pos += 1
        u = {k: hc.draw_u(gen_u, shapes[k], dtype=cfg.dtype) for k in kinds}       # kind -> (L, H)
        ce, l0, grads, dla = gated_loss_and_grads(params, cfg, batch, log_alpha, u, lam, reduction, hc, gen_drop)
        opt_gates.step(log_alpha, dla, lr_g)
        if opt_model is not None:
            g_model = {n: grads[n] for n in names if n in grads}
            clip_grad_norm(g_model, clip)
            opt_model.step(params, g_model, lr_params)
        ce_acc, n_acc = ce_acc + float(ce), n_acc + 1
        if on_step is not None:
            on_step(step, params, log_alpha)
        if step % log_every == 0 or step == steps:
            _, kept = deterministic_gates(log_alpha, hc)
            _, kept_c = deterministic_gates(log_alpha, hc, "continuous")
            share = settled_share(log_alpha, hc, SETTLED_AT)
            history.append({"step": step, "ce": ce_acc / n_acc, "l0": float(l0),
                             "open": {k: int(kept[k].sum()) for k in kinds},
                             "open_continuous": {k: int(kept_c[k].sum()) for k in kinds}, "settled": share})
            ce_acc, n_acc = 0.0, 0
            if progress:
                h = history[-1]
                print(f"step {step}: CE {h['ce']:.3f}  L_C {h['l0']:.2f}  open {h['open']}  settled {share:.2f}")
            if settle is not None and share >= settle:
                break
    gates, retained = deterministic_gates(log_alpha, hc)
    gates_c, retained_c = deterministic_gates(log_alpha, hc, "continuous")
    share = settled_share(log_alpha, hc, SETTLED_AT)
    return PruneResult(log_alpha, params, gates, retained, history, names, gates_c, retained_c, share, step,
                       settle is not None and share >= settle)


# prune()'s keyword settings and their defaults: what a cache key must hold besides kinds, lambda and steps
_PRUNE_DEFAULTS = {n: p.default for n, p in inspect.signature(prune).parameters.items() if p.kind == p.KEYWORD_ONLY}


# --------------------------------------------------------------------------- evaluation
def full_gates(cfg, retained, dtype=None):
    """Gates for every attention type from retained masks (kind -> (L, H) bool): 1 for kept heads, 0 for
    pruned ones, 1 for kinds without a mask (the fixed 0/1 configuration of a pruned model)."""
    out = {}
    for k in GATE_KINDS:
        m = retained.get(k)
        shape = (cfg.n_layers(k), cfg.n_heads)
        out[k] = (xp.ones(shape, dtype=dtype or cfg.dtype) if m is None
                  else backend.to_device(backend.host_array(m, dtype="float64"), dtype or cfg.dtype))  # (L, H)
    return out


def gated_bleu(params, cfg, vocab, src, refs, gates=None, n=None, beam=1):
    """Corpus BLEU of ``translate(..., gates)`` on the first ``n`` pairs (all when n is None)."""
    from .translate import translate
    src, refs = (src, refs) if n is None else (src[:n], refs[:n])
    hyps = translate(params, cfg, vocab, src, gates=gates, beam=beam)
    return float(bleu(hyps, refs))


def format_retained(retained):
    """One line per attention type: retained heads per layer, e.g. 'enc       2 1 0 (3 of 12)'."""
    lines = []
    for k, m in retained.items():
        m = backend.to_host(m)
        per_layer = " ".join(str(int(r.sum())) for r in m)
        lines.append(f"{k:<9} per layer {per_layer}  ({int(m.sum())} of {m.size})")
    return "\n".join(lines)


def specialised_share(retained, roles):
    """(share of heads with a role among the retained ones, share among all heads) for one (L, H) mask and
    roles {(l, h): set} from :func:`minihead.roles.classify_heads`. The paper's claim (sec. 6.2, Figure 8)
    is that the first exceeds the second."""
    m = backend.to_host(retained)
    heads = [(l, h) for l in range(m.shape[0]) for h in range(m.shape[1])]
    special = [lh for lh in heads if roles.get(lh)]
    kept = [lh for lh in heads if m[lh]]
    share_all = len(special) / len(heads)
    share_kept = (sum(1 for lh in kept if roles.get(lh)) / len(kept)) if kept else float("nan")
    return share_kept, share_all


# --------------------------------------------------------------------------- what a sweep shows
# One copy of each reading of the sweeps, for chapters 5 and 6 and the reproduce report.
def retained_shares(run, cfg):
    """kind -> share of that kind's heads retained by one run of :func:`prune_study`."""
    return {k: n / (cfg.n_layers(k) * cfg.n_heads) for k, n in run["n_retained"].items()}


def type_order_holds(run, cfg):
    """Voita et al. sec. 8 at the end of one all-attention run: encoder self-attention keeps the smallest share
    of its heads, decoder-encoder attention the largest (enc <= dec_self <= dec_enc and enc < dec_enc)."""
    s = retained_shares(run, cfg)
    return s["enc"] <= s["dec_self"] <= s["dec_enc"] and s["enc"] < s["dec_enc"]


def half_closed_step(history, kind, n_heads):
    """First logged step of a pruning run's ``history`` at which at most half of the n_heads heads of ``kind``
    are open (None: never)."""
    return next((h["step"] for h in history if h["open"][kind] <= n_heads / 2), None)


def encoder_closes_first(run, cfg):
    """Along one all-attention run, encoder self-attention is the first type to lose half of its heads (another
    type may lose half at the same logged step, never earlier). Returns (holds, kind -> step or None)."""
    steps = {k: half_closed_step(run["history"], k, cfg.n_layers(k) * cfg.n_heads) for k in GATE_KINDS}
    holds = steps["enc"] is not None and all(t is None or t >= steps["enc"] for t in steps.values())
    return holds, steps


def mean_layer(mask):
    """Mean layer index (0 = lowest) of the retained heads of one (L, H) mask; 0 when none is retained."""
    m = xp.asarray(mask, dtype="float64")                                   # (L, H)
    return float((m.sum(1) * xp.arange(m.shape[0])).sum() / max(float(m.sum()), 1.0))


def survivor_layers(run, cfg):
    """Voita et al. sec. 8: decoder self-attention survives in the lower layers, decoder-encoder attention in
    the higher ones. For each of the two types that lost heads in ``run``: (kind, mean layer of its survivors,
    holds), holds = below the middle layer (n_dec_layers - 1) / 2 for dec_self, above it for dec_enc."""
    mid = (cfg.n_dec_layers - 1) / 2
    out = []
    for k, below in (("dec_self", True), ("dec_enc", False)):
        if k in run["n_retained"] and run["n_retained"][k] < cfg.n_layers(k) * cfg.n_heads:
            ml = mean_layer(run["retained"][k])
            out.append((k, ml, ml < mid if below else ml > mid))
    return out


# --------------------------------------------------------------------------- cache
def params_fingerprint(params):
    """SHA-1 over the names, shapes and bytes of every weight: a cache entry is tied to the exact model."""
    h = hashlib.sha1()
    for k in sorted(params):
        a = backend.to_host(params[k])
        h.update(f"{k}{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def study_key(study, n_test):
    return {"version": CACHE_VERSION, "study": study.name, "model": params_fingerprint(study.params),
            "cfg": study.cfg.to_dict(), "n_test": n_test}


def _cache_dir(study, cache_dir):
    return cache_dir or os.path.dirname(os.path.abspath(study.path))


def baseline(study, n_test=None, cache_dir=None):
    """Test BLEU of the study model with every head (cached as prune-baseline-<hash>.json)."""
    key = {**study_key(study, n_test), "what": "baseline"}
    path = os.path.join(_cache_dir(study, cache_dir), f"prune-baseline-{key_hash(key)}.json")
    src, ref = study.splits["test"]
    return cached_json(path, key, lambda: {"bleu": gated_bleu(study.params, study.cfg, study.vocab, src, ref, n=n_test)})


def _tolist(masks):
    return {k: backend.to_host(v).tolist() for k, v in masks.items()}


def prune_study(study, kinds, lam, steps, n_test=None, cache_dir=None, after=None, **prune_kw):
    """:func:`prune` the study model at one lambda and score it on the test set, cached under
    ``runs/<study>/prune-<kinds>-<lambda>-<hash>.json`` (hash of every setting of :func:`prune`, defaults
    included, the model's fingerprint and n_test). Returns a dict: lam, kinds, retained / gates / log_alpha (kind -> nested lists),
    n_retained (kind -> int), bleu (all three under the paper's binary readout), their continuous twins
    retained_continuous / gates_continuous / n_retained_continuous / bleu_continuous (the official code's readout),
    settled_share, steps_used, settled, history, cached. ``after``: (name, settings, measure), where
    ``measure(params, gates, retained)`` -> a JSON-able dict measured on the pruned model (the head roles
    re-measured with its gates) and stored under ``name``; ``settings`` (what determines it) join the cache key."""
    kinds = check_kinds(kinds)
    # the key holds every keyword setting of prune(), defaults included, so a changed default is a new key
    defaults = _PRUNE_DEFAULTS
    unknown = set(prune_kw) - set(defaults)
    if unknown:
        raise PruneError(f"prune_study: unknown pruning settings {sorted(unknown)}; prune() takes {sorted(defaults)}")
    settings = {**defaults, **prune_kw}
    settings.pop("progress")
    settings.pop("on_step")
    hc = settings.pop("hc") or HardConcrete()
    settings.update({"kinds": list(kinds), "lam": float(lam), "steps": int(steps), "hc": asdict(hc)})
    prune_kw = {k: v for k, v in prune_kw.items() if k != "hc"}
    key = {**study_key(study, n_test), "what": "prune", **settings}
    if after is not None:
        key["after"] = [after[0], after[1]]
    path = os.path.join(_cache_dir(study, cache_dir), f"prune-{kinds_tag(kinds)}-{lam:g}-{key_hash(key)}.json")

    def compute():
        r = prune(study.params, study.cfg, study.corpus, kinds, lam, steps, hc=hc, **prune_kw)
        src, ref = study.splits["test"]
        score = gated_bleu(r.params, study.cfg, study.vocab, src, ref, gates=r.gates, n=n_test)  # kinds not gated: 1
        score_c = gated_bleu(r.params, study.cfg, study.vocab, src, ref, gates=r.gates_continuous, n=n_test)
        return {"lam": float(lam), "kinds": list(kinds), "steps": int(steps), "bleu": score,
                "retained": _tolist(r.retained), "gates": _tolist(r.gates), "log_alpha": _tolist(r.log_alpha),
                "n_retained": {k: int(r.retained[k].sum()) for k in kinds}, "history": r.history,
                "bleu_continuous": score_c, "retained_continuous": _tolist(r.retained_continuous),
                "gates_continuous": _tolist(r.gates_continuous),
                "n_retained_continuous": {k: int(r.retained_continuous[k].sum()) for k in kinds},
                "settled_share": r.settled_share, "steps_used": int(r.steps_used), "settled": bool(r.settled),
                **({after[0]: after[2](r.params, r.gates, r.retained)} if after is not None else {})}
    return cached_json(path, key, compute)


def sweep(study, lambdas, kinds=("enc",), steps=300, cache_dir=None, n_test=None, progress=True, after=None,
          **prune_kw):
    """:func:`prune_study` for each lambda (Figure 7: BLEU against retained heads; Figure 8: which heads
    survive). Returns the list of result dicts in the order of ``lambdas``."""
    out = []
    for lam in lambdas:
        r = prune_study(study, kinds, lam, steps, n_test=n_test, cache_dir=cache_dir, after=after, **prune_kw)
        if progress:
            print(f"lambda {lam:g}: retained {r['n_retained']} (continuous {r['n_retained_continuous']}), test BLEU "
                  f"{r['bleu']:.2f} (continuous {r['bleu_continuous']:.2f}), settled {r['settled_share']:.2f} after "
                  f"{r['steps_used']} steps" + (" (cached)" if r["cached"] else ""))
        out.append(r)
    return out


def reference_bleu(study, kinds, at_steps, n_test=None, cache_dir=None, **prune_kw):
    """The step-matched reference of a sweep (sec. 6.2: pruning runs also train on, so each is compared with a
    model trained for the same steps): one lambda = 0 run of :func:`prune` with the same settings, run to the
    largest of ``at_steps`` without stopping when settled, scored on the test set (binary gates of that moment)
    after each step in ``at_steps``. The same seed draws the same batches and gate noise, so its first n steps ARE
    the lambda = 0 run of n steps. Cached as prune-reference-<hash>.json. Returns {step: BLEU}."""
    kinds = check_kinds(kinds)
    at = sorted({int(t) for t in at_steps})
    settings = {**_PRUNE_DEFAULTS, **prune_kw}
    for k in ("progress", "on_step", "hc", "settle"):
        settings.pop(k, None)
    key = {**study_key(study, n_test), "what": "reference", "kinds": list(kinds), "at": at, **settings}
    path = os.path.join(_cache_dir(study, cache_dir), f"prune-reference-{key_hash(key)}.json")
    src, ref = study.splits["test"]

    def compute():
        scores = {}

        def score(step, params, log_alpha):
            if step in at:
                gates, _ = deterministic_gates(log_alpha)
                scores[str(step)] = gated_bleu(params, study.cfg, study.vocab, src, ref, gates=gates, n=n_test)
        prune(study.params, study.cfg, study.corpus, kinds, 0.0, max(at), settle=None, on_step=score,
              **{k: v for k, v in prune_kw.items() if k not in ("settle", "progress")})
        return {"bleu": scores}
    return {int(k): v for k, v in cached_json(path, key, compute)["bleu"].items()}


def with_reference(study, runs, n_test=None, cache_dir=None, **prune_kw):
    """The runs of an encoder :func:`sweep`, each with ``ref_bleu``: the BLEU of the lambda = 0 run at the step
    where that run stopped (:func:`reference_bleu`)."""
    if not runs:
        return runs
    ref = reference_bleu(study, runs[0]["kinds"], [r["steps_used"] for r in runs], n_test=n_test,
                         cache_dir=cache_dir, **prune_kw)
    return [{**r, "ref_bleu": ref[int(r["steps_used"])]} for r in runs]


# --------------------------------------------------------------------------- from scratch (Table 2)
def scratch_budget(study, prune_steps, prune_max_tokens=None):
    """"Same budget" for a configuration trained from scratch, in batches of the study's size: the steps the
    study model was trained for (its last logged step) plus the pruning steps, the latter scaled by
    prune_max_tokens / the study's max_tokens when pruning used smaller batches (same number of training
    tokens seen, to within a batch). Without ``prune_max_tokens``: study steps + pruning steps."""
    steps = float(prune_steps)
    if prune_max_tokens is not None:
        steps *= prune_max_tokens / float(checkpoint.load(study.path).meta["train"]["max_tokens"])
    return int(study.history[-1]["step"]) + int(round(steps))


def from_scratch(study, retained, steps, n_test=None, cache_dir=None, progress=False):
    """Train the study's architecture from random initialisation (the study's seed, so the same initial
    weights and batch order) with the head configuration ``retained`` fixed (kind -> (L, H) bool; 0/1 gates,
    missing kinds all 1) for ``steps`` steps with the study's training settings (lr schedule, batches,
    dropout), and score the final model (one dev evaluation, at the end; no early stopping or checkpoint
    selection, like the pruned model) on the test set with the same gates. Cached as
    ``scratch-<hash>.json`` beside its run folder ``scratch-<hash>/``; the training writes ``last.npz`` every
    ``SCRATCH_SAVE_EVERY`` steps, so an interrupted run resumes there. Returns dict bleu, steps, best_dev_bleu,
    history, cached."""
    from .train import TrainConfig, train
    masks = {k: backend.to_host(v).astype(bool).tolist() for k, v in retained.items() if v is not None}
    meta = checkpoint.load(study.path).meta
    if "train" not in meta:
        raise PruneError(f"{study.path}: no training settings in the checkpoint metadata")
    # one dev evaluation, at the end: the model scored is the final one, as for the pruned model
    tcfg = replace(TrainConfig(**meta["train"]), max_steps=int(steps), eval_every=int(steps))
    key = {**study_key(study, n_test), "what": "scratch", "masks": masks, "train": tcfg.to_dict()}
    name = f"scratch-{key_hash(key)}"
    folder = _cache_dir(study, cache_dir)

    def compute():
        gates = full_gates(study.cfg, masks)
        run_dir = os.path.join(folder, name)
        res = train(study.corpus, study.cfg, tcfg, run_dir, progress=progress, gates=gates,
                    resume=os.path.exists(os.path.join(run_dir, "last.npz")), save_every=SCRATCH_SAVE_EVERY)
        best = checkpoint.load(res.best_path, expect_cfg=study.cfg)
        src, ref = study.splits["test"]
        score = gated_bleu(best.params, study.cfg, study.vocab, src, ref, gates=gates, n=n_test)
        return {"bleu": score, "steps": int(steps), "best_dev_bleu": float(res.best_bleu),
                "history": res.history, "retained": masks}
    return cached_json(os.path.join(folder, name + ".json"), key, compute)


# --------------------------------------------------------------------------- command line
def add_prune_command(subparsers):
    """Register ``prune CHECKPOINT --lambda L [--kinds enc|all] [--steps N]`` on an argparse subparsers."""
    p = subparsers.add_parser("prune", help="prune heads with hard-concrete gates; report kept heads and BLEU")
    p.add_argument("checkpoint")
    p.add_argument("--lambda", dest="lam", type=float, required=True, help="weight of the L0 penalty")
    p.add_argument("--kinds", default="enc", choices=sorted(KIND_SETS), help="enc: encoder self-attention; all")
    p.add_argument("--steps", type=int, default=300, help="step cap (the run stops once the gates settle)")
    p.add_argument("--settle", type=float, default=0.9, help="stop once this share of gates is settled")
    p.add_argument("--data", default="data_small")
    p.add_argument("--n-test", type=int, default=None, help="BLEU on the first N test sentences")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr-gates", type=float, default=0.1, help="0: the joint optimiser (gates at --lr-params)")
    p.add_argument("--lr-params", type=float, default=1e-3)
    p.add_argument("--reduction", default="sum", choices=["sum", "layer_mean"])
    p.add_argument("--out", default=None, help="save the pruned model here (.npz; log_alpha as extras)")
    p.set_defaults(func=cmd_prune)
    return p


def cmd_prune(a):
    """Load the checkpoint and the training pairs it was trained on (the first n_train of its metadata),
    prune, print retained heads per layer and test BLEU before and after."""
    from .data.corpus import read_parallel
    from .train import Corpus
    ck = checkpoint.load(a.checkpoint)
    pairs = {s: read_parallel(os.path.join(a.data, f"{s}.src"), os.path.join(a.data, f"{s}.tgt"))
             for s in ("train", "dev", "test")}
    train_meta = ck.meta.get("train", {})
    corpus = Corpus.build(pairs["train"], pairs["dev"], n_train=train_meta.get("n_train"), vocab=ck.vocab)
    kinds = check_kinds(a.kinds)
    max_tokens = int(train_meta.get("max_tokens", 2500))
    print(f"pruning {', '.join(kinds)} heads of {a.checkpoint}: lambda {a.lam:g}, {a.steps} steps, "
          f"{len(corpus.train_src)} training pairs")
    r = prune(ck.params, ck.cfg, corpus, kinds, a.lam, a.steps, lr_gates=a.lr_gates or None, lr_params=a.lr_params,
              reduction=a.reduction, max_tokens=max_tokens, seed=a.seed, settle=a.settle, progress=True)
    src, ref = [s for s, _ in pairs["test"]], [t for _, t in pairs["test"]]
    before = gated_bleu(ck.params, ck.cfg, ck.vocab, src, ref, n=a.n_test)
    after = gated_bleu(r.params, ck.cfg, ck.vocab, src, ref, gates=r.gates, n=a.n_test)
    after_c = gated_bleu(r.params, ck.cfg, ck.vocab, src, ref, gates=r.gates_continuous, n=a.n_test)
    print(f"gates settled: {r.settled_share:.2f} after {r.steps_used} steps"
          + ("" if r.settled else f" (did not reach {a.settle:g} within the cap)"))
    print("retained heads (binary readout, the paper's):\n" + format_retained(r.retained))
    print("retained heads (continuous readout, the official code's):\n" + format_retained(r.retained_continuous))
    n = len(src) if a.n_test is None else min(a.n_test, len(src))
    print(f"test BLEU ({n} sentences, greedy): all heads {before:.2f}, pruned {after:.2f} (continuous gates "
          f"{after_c:.2f})")
    if a.out:
        checkpoint.save(a.out, r.params, ck.cfg, ck.vocab, meta={**ck.meta, "pruned": {
            "kinds": list(kinds), "lambda": a.lam, "steps": a.steps, "seed": a.seed}},
            extra={f"log_alpha.{k}": v for k, v in r.log_alpha.items()})
        print(f"saved {a.out}")
    return {"retained": r.retained, "bleu_before": before, "bleu_after": after, "bleu_after_continuous": after_c,
            "result": r}
