"""Pruning attention heads with hard-concrete gates (Voita et al. 2019, sec. 6): the algorithm alone. The cached
lambda sweep (Figures 7 and 8), its step-matched reference and the same head configurations trained from scratch
(Table 2) are stages of :mod:`minihead.stages`; what a sweep shows is judged in :mod:`minihead.findings`.

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
optimiser instead (the gates at the weights' rate). On an earlier quick preset the joint optimiser at lr 1e-3
left every gate unsettled after a 600-step cap, while gates at their own rate settled within a few hundred steps
(docs/experiments.md has the numbers): the official code's joint schedule needs thousands of steps that a CPU
reproduction cannot spend, which is why the separate rate is kept.

Training runs until the gates settle (sec. 6.1: "gates are either almost completely closed or completely
open"): every ``log_every`` steps the share of gates with max(P(g = 0), P(g = 1)) > 0.95 is measured and the
run stops once it reaches ``settle`` (0.9), or at ``steps`` (the cap); the result records whether it settled.
With ``finetune`` the cap is a budget instead: once the gates settle they are fixed at their binary readout and the
weights train on for the rest of the ``steps`` (the paper starts pruning from a converged model and continues
training, sec. 6.1-6.2), so every run of a sweep, lambda = 0 included, trains exactly ``steps`` steps and the
lambda = 0 run is itself the step-matched reference. A run whose gates never settle trains the whole budget with
sampled gates; at lambda = 0 that is common, since open gates only drift towards P(g = 1) > 0.95 under the
cross-entropy.

Which weights train: encoder-only pruning (kinds = ("enc",)) freezes the decoder, as the paper does; with
shared embeddings (one matrix for source, target and the output projection) the embedding is frozen too, since
it is part of the decoder. Only encoder layers and the encoder's final LayerNorm (and a separate source
embedding, if any) then change. Pruning any decoder attention type trains every weight.

At test time each gate is 0 or 1, whichever of P(g = 0) and P(g = 1) is larger (the paper, sec. 6.1; the
default ``readout="binary"``, used for "heads kept" and BLEU); the official code's continuous gate
g = clip(sigmoid(log_alpha)(zeta - gamma) + gamma, 0, 1) (Louizos eq. 13; a head kept iff g > 0, BLEU scored
with the fractional gates) is reported beside it (``readout="continuous"``).
"""
from dataclasses import asdict, dataclass, field, fields
from typing import Optional

from . import backend
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
from .translate import translate

KIND_SETS = {"enc": ("enc",), "all": GATE_KINDS}   # the CLI's --kinds
READOUTS = ("binary", "continuous")                # test-time gates: the paper's / the official code's
SETTLED_AT = 0.95                                  # a gate is settled when max(P(g=0), P(g=1)) > this
LATER_SETTINGS = {"finetune": False}               # PruneSettings fields added later, with the value older runs had


class PruneError(MiniheadError, ValueError):
    """Unknown attention kinds, bad pruning settings, or a cache file that does not parse."""


@dataclass(frozen=True)
class PruneSettings:
    """How one pruning run trains, everything but the attention types, lambda and the step cap (:func:`prune`
    says what each does). The defaults are the ones this project uses: gates with their own Adam at ``lr_gates``
    (None: the official code's joint optimiser, gates at ``lr_params``), eq. 6's sum over heads
    (``reduction="layer_mean"``: the official code's), gates starting open (``init``), and a run that stops once
    the share ``settle`` of its gates is settled (None: always the full cap), and with ``finetune`` the weights train
    on with the settled gates fixed for the rest of the cap (a fixed budget). A cached run's key holds every field
    (:meth:`to_dict`, :func:`minihead.stages.prune_study`), so a changed default is a new key."""
    lr_gates: Optional[float] = 0.1
    lr_params: float = 1e-3
    reduction: str = "sum"
    max_tokens: int = 2500
    seed: int = 0
    clip: float = 1.0
    log_every: int = 25
    train_params: str = "auto"
    init: float = LOG_ALPHA_OPEN
    hc: HardConcrete = field(default_factory=HardConcrete)
    settle: Optional[float] = 0.9
    finetune: bool = False

    def to_dict(self):
        """Every field as a dict (the gate's constants as a dict), except a field added later at the value every run
        had before it existed (:data:`LATER_SETTINGS`), so the runs cached before it keep their keys."""
        return {k: v for k, v in asdict(self).items() if not (k in LATER_SETTINGS and v == LATER_SETTINGS[k])}

    @classmethod
    def of(cls, **settings):
        """Settings from keywords (a scale's ``"prune"`` dict of :data:`minihead.study.SCALES`); an unknown name is
        a PruneError listing the known ones, not a TypeError."""
        known = {f.name for f in fields(cls)}
        unknown = set(settings) - known
        if unknown:
            raise PruneError(f"unknown pruning settings {sorted(unknown)}; the settings are {sorted(known)}")
        return cls(**settings)

    def check(self):
        """Refuse settings no run can use (a PruneError naming each value)."""
        joint = self.lr_gates is None
        if (self.lr_params < 0 or (not joint and self.lr_gates <= 0) or (joint and self.lr_params <= 0)
                or self.log_every < 1 or (self.settle is not None and not 0 < self.settle <= 1)
                or (self.finetune and (self.settle is None or self.lr_params <= 0))):
            raise PruneError(f"prune: need lr_gates > 0 (or None with lr_params > 0), lr_params >= 0, log_every >= 1, "
                             f"settle in (0, 1] or None, and settle and lr_params > 0 to finetune (got lr_gates="
                             f"{self.lr_gates}, lr_params={self.lr_params}, log_every={self.log_every}, settle="
                             f"{self.settle}, finetune={self.finetune})")
        return self


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
    steps_used: int = 0               # steps trained, gate phase and fine-tuning together
    settled: bool = False             # whether settled_share reached ``settle`` within the step cap
    gate_steps: int = 0               # steps with sampled gates (the run's gate phase stops once settled)
    finetune_history: list = None     # per log interval of the fine-tuning: step, mean cross-entropy


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


def prune(params, cfg, corpus, kinds=("enc",), lam=0.01, steps=300, settings=None, *, progress=False,
          on_step=None):
    """Continue training a converged model with hard-concrete gates on the heads of ``kinds``, until the gates
    settle or for at most ``steps`` steps; ``settings`` (:class:`PruneSettings`, its defaults when None) say how.

    Each step: u ~ U(0, 1) per head from a host generator seeded by (seed, 1); gates g = sample_forward;
    cross-entropy and its gradients (weights and gates) by ``model.loss_and_grads`` with dropout drawn from
    a generator seeded by (seed, 2); d log_alpha = sample_backward(dg) + lambda * dL_C/dlog_alpha with
    L_C = l0_total(P(g != 0), reduction) ("sum": the paper's eq. 6; "layer_mean": the official code's);
    log_alpha takes an Adam step at ``lr_gates`` (None: at ``lr_params``, the official code's joint optimiser),
    the weights named by :func:`trainable_names` an Adam step at the constant ``lr_params`` after clipping their
    gradient norm to ``clip``. Batches of ``max_tokens`` are visited in an order shuffled per epoch by (seed,
    epoch). Every ``log_every`` steps the settled share (gates with max(P(g = 0), P(g = 1)) > SETTLED_AT,
    :func:`minihead.gates.settled_share`) is logged; with ``settle`` (a share in (0, 1]; None: always run
    ``steps``) the gate phase stops at the first logged step where it is >= ``settle``; with ``finetune`` the gates
    are then fixed at their binary readout and the weights train on to step ``steps`` (:func:`_finetune`).
    ``on_step(step, params, log_alpha)``, if given, is called after every step (the step-matched reference
    evaluates the run there).
    Same seed, same numbers. Returns a :class:`PruneResult` (binary and continuous readouts)."""
    kinds = check_kinds(kinds)
    st = settings or PruneSettings()
    if steps < 1 or lam < 0:
        raise PruneError(f"prune: need steps >= 1 and lambda >= 0 (got steps={steps}, lam={lam})")
    st.check()
    lr_g = st.lr_params if st.lr_gates is None else st.lr_gates
    hc = st.hc or HardConcrete()
    params = {k: v.copy() for k, v in params.items()}                # the caller's model stays as it was
    shapes = {k: (cfg.n_layers(k), cfg.n_heads) for k in kinds}
    log_alpha = {k: init_log_alpha(shapes[k], st.init, dtype=cfg.dtype) for k in kinds}  # kind -> (L, H)
    names = trainable_names(params, cfg, kinds, st.train_params)
    opt_gates = Adam(log_alpha)
    opt_model = Adam(params, names=names) if names and st.lr_params > 0 else None
    gen_u, gen_drop = backend.rng((st.seed, 1)), backend.rng((st.seed, 2))
    vocab = corpus.vocab
    src_ids = [vocab.encode(s) for s in corpus.train_src]
    tgt_ids = [vocab.encode(t) for t in corpus.train_tgt]
    all_batches = list(batches(src_ids, tgt_ids, st.max_tokens))

    if st.finetune and opt_model is None:
        raise PruneError(f"prune: finetune needs weights to train (train_params={st.train_params!r} trains none)")
    next_batch = _batch_stream(all_batches, st.seed)
    history, ce_acc, n_acc, step = [], 0.0, 0, 0
    for step in range(1, steps + 1):
        batch = next_batch()
        u = {k: hc.draw_u(gen_u, shapes[k], dtype=cfg.dtype) for k in kinds}       # kind -> (L, H)
        ce, l0, grads, dla = gated_loss_and_grads(params, cfg, batch, log_alpha, u, lam, st.reduction, hc, gen_drop)
        opt_gates.step(log_alpha, dla, lr_g)
        if opt_model is not None:
            _weight_step(params, grads, names, opt_model, st)
        ce_acc, n_acc = ce_acc + float(ce), n_acc + 1
        if on_step is not None:
            on_step(step, params, log_alpha)
        if step % st.log_every == 0 or step == steps:
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
            if st.settle is not None and share >= st.settle:
                break
    gates, retained = deterministic_gates(log_alpha, hc)
    gates_c, retained_c = deterministic_gates(log_alpha, hc, "continuous")
    share = settled_share(log_alpha, hc, SETTLED_AT)
    settled = st.settle is not None and share >= st.settle
    gate_steps, tuned = step, []
    if st.finetune and settled:
        step = _finetune(params, cfg, gates, names, opt_model, next_batch, gen_drop, st, gate_steps, steps, tuned,
                         on_step=None if on_step is None else lambda t, p: on_step(t, p, log_alpha), progress=progress)
    return PruneResult(log_alpha, params, gates, retained, history, names, gates_c, retained_c, share, step,
                       settled, gate_steps, tuned)


def _weight_step(params, grads, names, opt_model, st):
    """The weights' update of a pruning or fine-tuning step: the gradients of the weights named ``names``, their
    norm clipped to ``st.clip``, one Adam step at the constant ``st.lr_params``."""
    g_model = {n: grads[n] for n in names if n in grads}
    clip_grad_norm(g_model, st.clip)
    opt_model.step(params, g_model, st.lr_params)


def _batch_stream(all_batches, seed):
    """A function returning the next batch: each epoch visits every batch once, in an order shuffled by (seed,
    epoch) (the gate phase and the fine-tuning draw from one stream, so fine-tuning goes on where pruning stopped)."""
    state = {"epoch": 0, "pos": 0, "order": backend.rng((seed, 0)).permutation(len(all_batches))}

    def next_batch():
        if state["pos"] >= len(state["order"]):
            state["epoch"], state["pos"] = state["epoch"] + 1, 0
            state["order"] = backend.rng((seed, state["epoch"])).permutation(len(all_batches))
        state["pos"] += 1
        return all_batches[int(state["order"][state["pos"] - 1])]
    return next_batch


def _finetune(params, cfg, gates, names, opt_model, next_batch, gen_drop, st, start, steps, log, on_step=None,
              progress=False):
    """Fine-tune a pruned model (sec. 6.2: the pruned model trains on): the weights named ``names`` take Adam steps
    at ``lr_params`` (same optimiser state as the gate phase, gradient norm clipped to ``clip``) on the
    cross-entropy of the model with the FIXED test-time ``gates`` (kind -> (L, H), 0 or 1), from step ``start`` + 1
    to ``steps``; every ``log_every`` steps {"step", "ce"} is appended to ``log``. Returns the last step."""
    ce_acc, n_acc, step = 0.0, 0, start
    for step in range(start + 1, steps + 1):
        ce, grads, _ = loss_and_grads(params, cfg, next_batch(), gates=gates, rng=gen_drop)
        _weight_step(params, grads, names, opt_model, st)
        ce_acc, n_acc = ce_acc + float(ce), n_acc + 1
        if on_step is not None:
            on_step(step, params)
        if step % st.log_every == 0 or step == steps:
            log.append({"step": step, "ce": ce_acc / n_acc})
            ce_acc, n_acc = 0.0, 0
            if progress:
                print(f"fine-tune step {step}: CE {log[-1]['ce']:.3f}")
    return step


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
    src, refs = (src, refs) if n is None else (src[:n], refs[:n])
    hyps = translate(params, cfg, vocab, src, gates=gates, beam=beam)
    return float(bleu(hyps, refs))


# --------------------------------------------------------------------------- cache


# --------------------------------------------------------------------------- from scratch (Table 2)


# --------------------------------------------------------------------------- command line


