"""The project's benchmark: ``python -m minihead.bench [--config default] [--rounds 7] [--profile]``.

The machine it runs on is usually shared, so nothing is timed once: the contenders run INTERLEAVED, one
pass over the same batches each per round (the order rotating from round to round), and every figure is
the median over rounds of a ratio measured within a round, with its min-max spread. One run reports:
- training-step throughput (target tokens a second) of the hand-written backward pass, with each batch in
  one piece and split into ``--shards`` row shards run in parallel processes (:mod:`minihead.shards`, the
  training setting ``shards``), beside the same forward differentiated by autograd, and beside PyTorch CPU
  eager on the identical architecture (when torch is installed; it is never a requirement);
- the step's achieved GFLOP/s, its matrix products counted from the shapes (:func:`step_flops`), beside
  the machine's float32 GEMM rate measured at the model's own linear shapes (:func:`gemm_fn`);
- the cost of the relevance (LRP) pass against a forward plus backward pass over the same batches;
- the peak resident memory of a process that only runs the training steps (a child process, so the
  other contenders do not count).
``--profile`` prints the functions of the training step that take the most time (cProfile) instead.
``--heads 2,4,8`` times instead the same model with its width split into that many heads a layer (heads of
d_model / H dimensions: the same matrix FLOPs in the linear layers), interleaved, each against the first count: what
per-head attention work (B x H x T x T tensors, narrow products) costs in NumPy.

``--backend cupy`` runs the same on a GPU: the step with the fused kernels (:mod:`minihead.kernels`) beside
the same step without them, against PyTorch CUDA eager on the identical architecture and batches; every pass
ends with a device synchronisation, so a round times finished work. ``--config paper`` is the paper's
Transformer-base size (6 + 6 layers, 8 heads of 64, d_model 512, d_ff 2048), for the benchmark only.
"""
import argparse
import cProfile
import io
import json
import math
import os
import pstats
import re
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace

from . import backend, kernels, lrp, model, shards
from .data.corpus import REPO_ROOT
from .data.vocab import make_batch
from .optim import Adam, clip_grad_norm
from .train import PRESETS, preset

OURS = "minihead"
SHARDED = "minihead, shards"
UNFUSED = "minihead, unfused"
# benchmark-only configuration: the paper's model size (Vaswani et al.'s Transformer-base, Voita et al. sec. 2)
BENCH_CONFIGS = {"paper": dict(n_enc_layers=6, n_dec_layers=6, n_heads=8, d_model=512, d_ff=2048, dropout=0.1)}


def bench_config(config, vocab_size):
    """The model Config of a training preset (:data:`minihead.train.PRESETS`) or of :data:`BENCH_CONFIGS`."""
    if config in BENCH_CONFIGS:
        return model.Config(vocab_size=vocab_size, **BENCH_CONFIGS[config])
    return preset(config, vocab_size)[0]


def synchronize():
    """Wait for the device's queued work, on every stream (cudaDeviceSynchronize; a no-op on the host), so a
    timed pass ends when its work does."""
    if backend.name == "cupy":
        backend.xp.cuda.Device().synchronize()


def synthetic_batches(vocab_size, n_batches=4, B=96, S=14, T=15, seed=0):
    """Random batches with the shape of data_small's (mean lengths ~13/14 tokens)."""
    gen = backend.rng(seed)
    out = []
    for _ in range(n_batches):
        src = [list(gen.integers(4, vocab_size, int(gen.integers(S - 4, S)))) for _ in range(B)]
        tgt = [list(gen.integers(4, vocab_size, int(gen.integers(T - 4, T)))) for _ in range(B)]
        out.append(make_batch(src, tgt, list(range(B))))
    return out


# --------------------------------------------------------------------------- contenders
def numpy_step_fn(cfg, params, n_shards=1, fused=True):
    """One training step of the package: forward, hand-written backward, clipping, Adam; with
    ``n_shards`` > 1 the forward and backward run as that many row shards in parallel processes (the
    workers stop when the step function is garbage-collected, or at ``step.workers.close()``).
    ``fused=False``: the GPU's fused kernels off for this step (:data:`minihead.kernels.FUSED`), so the
    NumPy expressions run on the device instead."""
    with kernels.switched(fused):
        opt = Adam(params)
    gen = backend.rng(0)
    workers = shards.workers_for(params, cfg, n_shards)

    def step(b):
        with kernels.switched(fused):
            if n_shards > 1:
                loss, grads, _ = shards.loss_and_grads(params, cfg, b, n_shards, rng=gen, workers=workers)
            else:
                loss, grads, _ = model.loss_and_grads(params, cfg, b, rng=gen)
            clip_grad_norm(grads, 1.0)               # returns a float: one host read a step, as in training
            opt.step(params, grads, 1e-4)
        return loss
    step.workers = workers
    return step


def autograd_step_fn(cfg, params):
    """The same forward, differentiated by autograd instead of our backward pass."""
    import autograd            # optional: autograd is a test-only dependency
    import autograd.numpy as anp
    opt = Adam(params)
    gen = backend.rng(0)

    def step(b):
        with backend.swapped(anp):
            grads = autograd.grad(lambda p: model.loss_forward(p, cfg, b, rng=gen)[0])(params)
        clip_grad_norm(grads, 1.0)
        opt.step(params, grads, 1e-4)
    return step


def torch_step_fn(cfg, device="cpu"):
    """PyTorch eager on the identical architecture (pre-norm, tied embeddings, same sizes), on the CPU or,
    with ``device="cuda"``, on the GPU (the batches handed over without a copy, through DLPack)."""
    import torch               # optional: the comparison runs only where torch is installed
    import torch.nn.functional as F
    if requested_blas_threads() and device == "cpu":
        torch.set_num_threads(requested_blas_threads())        # the same thread count as NumPy's BLAS
    torch.manual_seed(0)
    d, H, V = cfg.d_model, cfg.n_heads, cfg.vocab_size

    class MHA(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))

        def forward(self, xq, xkv, bias):
            B, Tq, _ = xq.shape
            Tk = xkv.shape[1]
            Q = self.q(xq).view(B, Tq, H, -1).transpose(1, 2)
            K = self.k(xkv).view(B, Tk, H, -1).transpose(1, 2)
            Vv = self.v(xkv).view(B, Tk, H, -1).transpose(1, 2)
            A = torch.softmax(Q @ K.transpose(-1, -2) / math.sqrt(d // H) + bias, -1)
            return self.o((A @ Vv).transpose(1, 2).reshape(B, Tq, d))

    class FFN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = torch.nn.Linear(d, cfg.d_ff), torch.nn.Linear(cfg.d_ff, d)

        def forward(self, x):
            return self.l2(F.dropout(F.relu(self.l1(x)), cfg.dropout, self.training))

    class Layer(torch.nn.Module):
        def __init__(self, cross):
            super().__init__()
            self.self_attn, self.ffn = MHA(), FFN()
            self.cross = MHA() if cross else None
            self.lns = torch.nn.ModuleList(torch.nn.LayerNorm(d, eps=cfg.ln_eps) for _ in range(3 if cross else 2))

        def forward(self, x, bias, enc=None, cross_bias=None):
            def drop(t):
                return F.dropout(t, cfg.dropout, self.training)
            h = self.lns[0](x)
            x = x + drop(self.self_attn(h, h, bias))
            if self.cross is not None:
                x = x + drop(self.cross(self.lns[1](x), enc, cross_bias))
            return x + drop(self.ffn(self.lns[-1](x)))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(V, d)
            self.enc = torch.nn.ModuleList(Layer(False) for _ in range(cfg.n_enc_layers))
            self.dec = torch.nn.ModuleList(Layer(True) for _ in range(cfg.n_dec_layers))
            self.enc_ln, self.dec_ln = torch.nn.LayerNorm(d, eps=cfg.ln_eps), torch.nn.LayerNorm(d, eps=cfg.ln_eps)

        def embed(self, ids):
            T = ids.shape[1]
            pos = torch.arange(T)[:, None] * torch.exp(-math.log(1e4) * torch.arange(0, d, 2) / d)  # (T, d/2)
            pe = torch.stack([torch.sin(pos), torch.cos(pos)], -1).reshape(T, d)
            return F.dropout(self.emb(ids) * math.sqrt(d) + pe, cfg.dropout, self.training)

        def forward(self, src, src_mask, tgt_in, tgt_mask):
            sb = torch.where(src_mask[:, None, None, :], 0.0, -1e9)
            T = tgt_in.shape[1]
            tb = torch.where(tgt_mask[:, None, None, :], 0.0, -1e9) + torch.triu(torch.full((T, T), -1e9), 1)
            x = self.embed(src)
            for layer in self.enc:
                x = layer(x, sb)
            enc = self.enc_ln(x)
            y = self.embed(tgt_in)
            for layer in self.dec:
                y = layer(y, tb, enc, sb)
            return self.dec_ln(y) @ self.emb.weight.T

    with torch.device(device):                       # tensors made inside forward land there too
        net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def tensor(a):
        if device == "cpu":
            return torch.from_numpy(backend.to_host(a))
        try:
            return torch.from_dlpack(a)              # the device array itself, no copy
        except (RuntimeError, TypeError, BufferError):
            return torch.as_tensor(a, device=device)  # through __cuda_array_interface__

    def step(b):
        src, tgt_in, tgt_out = (tensor(a) for a in (b.src, b.tgt_in, b.tgt_out))
        sm, tm = tensor(b.src_mask), tensor(b.tgt_mask)
        with torch.device(device):
            logits = net(src, sm, tgt_in, tm)
            loss = F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), reduction="none",
                                   label_smoothing=cfg.label_smoothing)
            loss = (loss * tm.reshape(-1)).sum() / tm.sum()
            opt.zero_grad()
            loss.backward()
            float(torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0))   # the norm read on the host, as ours
            opt.step()
    return step, torch.get_num_threads()


# --------------------------------------------------------------------------- counting and GEMM rate
def linear_shapes(cfg, batch):
    """Every linear layer of one teacher-forced forward pass as (rows N, d_in, d_out), the output
    projection included: the encoder's run on B*S rows, the decoder's on B*T (padded positions too)."""
    B, S = batch.src.shape
    T = batch.tgt_in.shape[1]
    d, f, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    ns, nt = B * S, B * T
    shapes = []
    for _ in range(cfg.n_enc_layers):
        shapes += [(ns, d, d)] * 4 + [(ns, d, f), (ns, f, d)]
    for _ in range(cfg.n_dec_layers):
        shapes += [(nt, d, d)] * 2 + [(nt, d, d)] * 2           # self-attention Q, K, V, O
        shapes += [(nt, d, d), (ns, d, d), (ns, d, d), (nt, d, d)]  # cross: Q, O on the target; K, V on the source
        shapes += [(nt, d, f), (nt, f, d)]
    shapes.append((nt, d, V))
    return shapes


def step_flops(cfg, batch):
    """Floating-point operations of the matrix products of one training step (forward + backward).

    A product (N, k) x (k, m) costs 2 N k m; each has two of the same size in the backward pass (dX and
    dW), so a step is 3x the forward. Attention adds Q K^T and A V per head (B, H, Tq, Tk, dh). Element-wise
    work (LayerNorm, softmax, dropout, Adam) is not counted: this is the work a GEMM rate can be held to."""
    B, S = batch.src.shape
    T = batch.tgt_in.shape[1]
    d = cfg.d_model
    fwd = sum(2 * n * k * m for n, k, m in linear_shapes(cfg, batch))
    attn = cfg.n_enc_layers * 2 * (2 * B * S * S * d) + cfg.n_dec_layers * 2 * (2 * B * T * T * d + 2 * B * T * S * d)
    return 3 * (fwd + attn)


def gemm_fn(cfg, batch, dtype="float32"):
    """The dense products of one training step's linear layers, alone: for each (N, k, m) of
    :func:`linear_shapes`, Y = X W, dX = dY W^T and dW = X^T dY on random float32 arrays. Returns
    (fn, flops); flops / seconds of fn() is the machine's GEMM rate at this model's shapes."""
    gen = backend.rng(1)
    ops, flops = [], 0
    cache = {}
    for n, k, m in linear_shapes(cfg, batch):
        if (n, k, m) not in cache:
            X, W, dY = (backend.to_device(gen.standard_normal(s), dtype) for s in ((n, k), (k, m), (n, m)))
            cache[(n, k, m)] = (X, W, dY)
        ops.append(cache[(n, k, m)])
        flops += 3 * 2 * n * k * m

    def run():
        acc = 0.0
        for X, W, dY in ops:
            Y = X @ W
            dX = dY @ W.T
            dW = X.T @ dY
            acc += float(Y[0, 0] + dX[0, 0] + dW[0, 0])   # float() syncs a GPU
        return acc
    return run, flops


# --------------------------------------------------------------------------- relevance pass
def bench_relevance(params, cfg, batches, repeats=3, rules=None):
    """Measured cost of the relevance pass over ``batches`` relative to a training-style forward plus
    backward pass (model.loss_and_grads, no dropout) over the same batches: the two passes alternate
    ``repeats`` times and the result is the median of t_relevance / t_forward_backward over the
    repeats (a float). ``rules``: the :class:`minihead.lrp.Rules` of :func:`minihead.lrp.relevance` (None: its default)."""
    batches = list(batches)

    def fb():
        acc = 0.0
        for b in batches:
            acc += float(model.loss_and_grads(params, cfg, b)[0])   # float() syncs a GPU
        return acc

    def rel():
        acc = 0.0
        for b in batches:
            acc += float(lrp.relevance(params, cfg, b, rules=rules).src.sum())
        return acc

    def seconds(fn):
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    fb(), rel()                                      # warm-up (allocator, BLAS threads)
    ratios = []
    for r in range(max(1, repeats)):
        first, second = (fb, rel) if r % 2 == 0 else (rel, fb)
        t = {first: seconds(first), second: seconds(second)}
        ratios.append(t[rel] / t[fb])
    return float(statistics.median(ratios))


# --------------------------------------------------------------------------- interleaved rounds
def one_pass(step, batches):
    """A contender: one pass of ``step`` over ``batches``, ending with a device synchronisation (so a round times
    finished work)."""
    def run_pass():
        for b in batches:
            step(b)
        synchronize()
    return run_pass


def interleaved(contenders, rounds, log=None):
    """Run each contender once per round, the order rotating by one each round; returns
    {name: [seconds of round 0, round 1, ...]}. A contender is a no-argument function."""
    names = list(contenders)
    times = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for n in names[k:] + names[:k]:
            t0 = time.perf_counter()
            contenders[n]()
            times[n].append(time.perf_counter() - t0)
        if log:
            log(f"  round {r + 1}/{rounds}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in names))
    return times


def spread(values):
    """(median, min, max) of a list of numbers."""
    return statistics.median(values), min(values), max(values)


def peak_rss_mib(pid="self"):
    """Peak resident memory of this process (or of process ``pid``) in MiB: VmHWM of /proc/<pid>/status where
    there is one (it starts afresh at exec, while ru_maxrss keeps the high-water mark of the process that
    spawned us)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _steps_only(config, vocab_size, n_steps, n_shards=1):
    """The child process of :func:`peak_memory_mib`: build, run ``n_steps`` training steps, print the peak."""
    cfg = bench_config(config, vocab_size)
    batches = synthetic_batches(vocab_size)
    step = numpy_step_fn(cfg, model.init_params(cfg, 0), n_shards)
    for i in range(n_steps):
        step(batches[i % len(batches)])
    workers = step.workers.procs if step.workers is not None else []
    print(json.dumps({"peak_rss_mib": peak_rss_mib() + sum(peak_rss_mib(p.pid) for p in workers)}))


def peak_memory_mib(config, vocab_size, n_steps=8, n_shards=1):
    """Peak resident memory (MiB) of a fresh process that builds the model and runs ``n_steps`` steps (with
    ``n_shards`` > 1, plus the peaks of its worker processes)."""
    code = f"from minihead.bench import _steps_only; _steps_only({config!r}, {vocab_size}, {n_steps}, {n_shards})"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_rss_mib"]


def requested_blas_threads():
    """The BLAS thread count ASKED FOR in the environment (None: the library's default, all cores), which the
    torch baseline is given too; :func:`minihead.study.blas_threads` is the count the library USES now."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var):
            return int(os.environ[var])
    return None


# --------------------------------------------------------------------------- the report
def run(config="default", vocab_size=1200, rounds=7, with_torch=True, with_autograd=True,
        with_relevance=True, with_memory=True, n_shards=2, log=print):
    """Run the benchmark and return its numbers (a dict); ``log`` prints the report as it goes.
    ``n_shards`` > 1 adds the sharded step (:mod:`minihead.shards`) as a contender of its own."""
    cfg = bench_config(config, vocab_size)
    gpu = backend.name == "cupy"
    if gpu:
        n_shards, with_memory = 1, False             # shards are host processes; host memory says nothing here
    batches = synthetic_batches(vocab_size)
    n_tok = sum(b.n_tokens for b in batches)
    flops = sum(step_flops(cfg, b) for b in batches)
    threads = requested_blas_threads()
    log(f"config {config!r}: {cfg.n_enc_layers}+{cfg.n_dec_layers} layers x {cfg.n_heads} heads, d_model "
        f"{cfg.d_model}, d_ff {cfg.d_ff}, vocabulary {vocab_size}; {len(batches)} batches of "
        f"~{n_tok // len(batches)} target tokens; backend {backend.name}, BLAS threads "
        f"{threads if threads else 'default (' + str(os.cpu_count()) + ' cores)'}; {rounds} interleaved rounds")

    def over_batches(step):
        return one_pass(step, batches)
    contenders = {OURS: over_batches(numpy_step_fn(cfg, model.init_params(cfg, 0)))}
    ours = [OURS]
    if gpu:
        contenders[UNFUSED] = over_batches(numpy_step_fn(cfg, model.init_params(cfg, 0), fused=False))
        ours.append(UNFUSED)
    sharded = None
    if n_shards > 1:
        sharded = numpy_step_fn(cfg, model.init_params(cfg, 0), n_shards)
        contenders[SHARDED] = over_batches(sharded)
        ours.append(SHARDED)
    if with_autograd and backend.name == "numpy":
        contenders["autograd"] = over_batches(autograd_step_fn(cfg, model.init_params(cfg, 0)))
    torch_threads = None
    if with_torch:
        try:
            step, torch_threads = torch_step_fn(cfg, "cuda" if gpu else "cpu")
            contenders["PyTorch"] = over_batches(step)   # synchronize() waits for every stream, PyTorch's too
        except ImportError:
            log("torch not installed: PyTorch comparison skipped (pip install torch==2.13.0)")
    gemm, gemm_flops = gemm_fn(cfg, batches[0])
    gemm_flops *= len(batches)
    contenders["GEMM"] = lambda: [gemm() for _ in batches]   # gemm() reads a number back: synchronised
    for fn in contenders.values():                   # warm-up: allocator, BLAS and torch threads
        fn()
    times = interleaved(contenders, rounds, log)
    if sharded is not None and sharded.workers is not None:
        sharded.workers.close()

    result = {"config": config, "backend": backend.name, "rounds": rounds, "target_tokens_per_pass": n_tok, "blas_threads": threads,
              "shards": n_shards if n_shards > 1 else None, "throughput": {}, "ratio": {}, "gflops": {}}
    label = {OURS: "minihead, hand-written backward" + (", fused kernels" if gpu else ""),
             SHARDED: f"minihead, {n_shards} shards in processes", UNFUSED: "minihead, NumPy expressions on CuPy",
             "autograd": "same forward, autograd backward",
             "PyTorch": f"PyTorch {_torch_version()} CUDA eager" if gpu else
             f"PyTorch {_torch_version()} CPU eager ({torch_threads} threads)"}
    log("\ntraining step throughput (target tokens / s; median over rounds, min-max in brackets; "
        "'x / this': x's speed over this contender's, a ratio taken within each round):")
    for name in [n for n in contenders if n != "GEMM"]:
        tps = [n_tok / t for t in times[name]]
        med, lo, hi = spread(tps)
        result["throughput"][name] = {"median": med, "min": lo, "max": hi}
        line = f"  {label[name]:<46s} {med:8.0f} [{lo:.0f}-{hi:.0f}]"
        for mine in (ours[:ours.index(name)] if name in ours else ours):    # each variant before this one
            ratios = [t_other / t_mine for t_mine, t_other in zip(times[mine], times[name])]  # same round
            med, lo, hi = spread(ratios)
            result["ratio"][name if mine == OURS else f"{name} [{mine}]"] = {"median": med, "min": lo, "max": hi}
            short = "minihead" if mine == OURS else ("unfused" if mine == UNFUSED else f"{n_shards} shards")
            line += f"   {short} / this = {med:.2f}x [{lo:.2f}-{hi:.2f}]"
        log(line)
    rate = [gemm_flops / t / 1e9 for t in times["GEMM"]]
    result["gflops"] = {"step_gflop": flops / len(batches) / 1e9, "gemm_rate": spread(rate),
                        "linear_share_of_flops": gemm_flops / flops}
    log(f"\nmatrix products of a step: {flops / len(batches) / 1e9:.1f} GFLOP per batch "
        f"({100 * gemm_flops / flops:.1f}% in the linear layers)")
    log(f"  float32 GEMM at the model's linear shapes: {spread(rate)[0]:6.1f} GFLOP/s [{min(rate):.1f}-{max(rate):.1f}]")
    if gpu and with_torch:
        result["gflops"]["peak_tflops"] = peak_tflops()
        log("  the GPU's dense matrix rate (8192^3 products, PyTorch): " +
            ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in result["gflops"]["peak_tflops"].items()))
    for mine in ours:
        achieved = [flops / t / 1e9 for t in times[mine]]
        share = [a / g for a, g in zip(achieved, rate)]
        key = {OURS: "", SHARDED: "sharded_", UNFUSED: "unfused_"}[mine]
        result["gflops"][key + "achieved"], result["gflops"][key + "share"] = spread(achieved), spread(share)
        log(f"  achieved by the {label[mine]} step: {spread(achieved)[0]:6.1f} GFLOP/s "
            f"[{min(achieved):.1f}-{max(achieved):.1f}], {100 * spread(share)[0]:.0f}% of the GEMM rate (same round) "
            f"[{100 * min(share):.0f}-{100 * max(share):.0f}%]")
    if with_relevance:
        ratio = bench_relevance(model.init_params(cfg, 0), cfg, batches, repeats=max(3, rounds // 2))
        result["relevance_ratio"] = ratio
        log(f"relevance (LRP) pass / (forward + backward) pass: {ratio:.2f}x (median of alternating repeats)")
    if with_memory:
        result["peak_rss_mib"] = peak_memory_mib(config, vocab_size)
        log(f"peak resident memory of a process running only the training steps: {result['peak_rss_mib']:.0f} MiB")
        if n_shards > 1:
            result["sharded_peak_rss_mib"] = peak_memory_mib(config, vocab_size, n_shards=n_shards)
            log(f"  the same with {n_shards} shards, its worker processes included: "
                f"{result['sharded_peak_rss_mib']:.0f} MiB")
    return result


def heads_run(config="default", counts=(2, 4, 8), vocab_size=1200, rounds=7, log=print):
    """The training step of ``config`` with ``n_heads`` set to each of ``counts`` (d_model kept, so heads of
    d_model / H dimensions), over the same batches, interleaved; returns {"config", "rounds", "counts",
    "throughput": {H: {median, min, max}} (target tokens / s), "ratio": {H: {median, min, max}}}, the ratio being
    the first count's time over this count's within each round (above 1: this count is faster)."""
    base = bench_config(config, vocab_size)
    bad = [h for h in counts if h < 1 or base.d_model % h]
    if not counts or bad:
        raise ValueError(f"--heads {counts}: each count must divide d_model {base.d_model} (not {bad})")
    batches = synthetic_batches(vocab_size)
    n_tok = sum(b.n_tokens for b in batches)
    log(f"config {config!r} with {', '.join(str(h) for h in counts)} heads a layer (d_model {base.d_model}, vocabulary "
        f"{vocab_size}); {len(batches)} batches of ~{n_tok // len(batches)} target tokens; {rounds} interleaved rounds")

    contenders = {}
    for h in counts:
        cfg = replace(base, n_heads=h)
        contenders[h] = one_pass(numpy_step_fn(cfg, model.init_params(cfg, 0)), batches)
    for fn in contenders.values():               # warm-up
        fn()
    times = interleaved(contenders, rounds, log)
    result = {"config": config, "rounds": rounds, "counts": list(counts), "throughput": {}, "ratio": {}}
    log("\ntraining step throughput by heads a layer (target tokens / s; median over rounds, min-max in brackets):")
    for h in counts:
        med, lo, hi = spread([n_tok / t for t in times[h]])
        result["throughput"][h] = {"median": med, "min": lo, "max": hi}
        r = spread([t0 / t for t0, t in zip(times[counts[0]], times[h])])
        result["ratio"][h] = {"median": r[0], "min": r[1], "max": r[2]}
        log(f"  {h} heads of {base.d_model // h:<4d} {med:8.0f} [{lo:.0f}-{hi:.0f}]   speed / {counts[0]} heads' = "
            f"{r[0]:.2f}x [{r[1]:.2f}-{r[2]:.2f}]")
    return result


def heads_table(result):
    """Markdown table of a :func:`heads_run` record (``docs/bench/heads-cpu.json``): per head count, target tokens / s
    and its speed over the first count's, medians over interleaved rounds with [min-max]. docs/benchmark.md holds
    exactly this table (tests/test_bench.py)."""
    first = result["counts"][0]
    lines = ["| heads a layer | target tokens / s | speed / %d heads' |" % first, "|---|---|---|"]
    for h in result["counts"]:
        t, r = result["throughput"][str(h)], result["ratio"][str(h)]
        ratio = "1.00x" if h == first else f"{r['median']:.2f}x [{r['min']:.2f}-{r['max']:.2f}]"
        lines.append(f"| {h} | {t['median']:,.0f} [{t['min']:,.0f}-{t['max']:,.0f}] | {ratio} |")
    return "\n".join(lines)


def peak_tflops(n=8192, repeats=10):
    """The GPU's dense matrix rate in TFLOP/s, bf16 and float32 (TF32 off), on n x n x n products by PyTorch:
    the ceiling the step's own products are held to."""
    import torch               # optional: only on a GPU machine with torch
    out = {}
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for name, dtype in (("bf16", torch.bfloat16), ("float32", torch.float32)):
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            for _ in range(3):
                a @ b
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(repeats):
                a @ b
            torch.cuda.synchronize()
            out[name] = 2 * n ** 3 * repeats / (time.perf_counter() - t0) / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return out


def gpu_table(doc):
    """Markdown table of a shipped GPU benchmark record (``docs/bench/h200.json``): per run and configuration,
    target tokens / s of minihead with and without the fused kernels and of PyTorch CUDA eager, and the ratios
    minihead / PyTorch and fused / unfused (medians over interleaved rounds, min-max in brackets) and the share of
    the float32 GEMM rate at the model's shapes the fused step reaches; then the range of each configuration's
    medians over the runs and the timed ``reproduce --quick``."""
    def r(x):
        return f"{x['median']:.2f}x [{x['min']:.2f}-{x['max']:.2f}]"
    lines = ["| run | configuration | rounds | minihead, fused (tok/s) | unfused (tok/s) | PyTorch CUDA eager (tok/s) "
             "| minihead / PyTorch | fused / unfused | share of the GEMM rate |", "|---|---|---|---|---|---|---|---|---|"]
    for run in doc["runs"]:
        res = run["result"]
        t = res["throughput"]
        lines.append(f"| {run['run']} | {res['config']} | {res['rounds']} | {t[OURS]['median']:,.0f} "
                     f"| {t[UNFUSED]['median']:,.0f} | {t['PyTorch']['median']:,.0f} | {r(res['ratio']['PyTorch'])} "
                     f"| {r(res['ratio'][UNFUSED])} | {100 * res['gflops']['share'][0]:.0f}% |")
    lines.append("")
    for config in dict.fromkeys(run["result"]["config"] for run in doc["runs"]):
        med = [run["result"]["ratio"]["PyTorch"]["median"] for run in doc["runs"] if run["result"]["config"] == config]
        lines.append(f"- {config}: minihead / PyTorch CUDA eager, median of each run: {min(med):.2f}x to "
                     f"{max(med):.2f}x over {len(med)} runs, at least 1.0x in {sum(m >= 1.0 for m in med)} of them.")
    rq = doc.get("reproduce_quick")
    if rq:
        lines.append(f"- `{rq['command']}`: {rq['seconds_gpu']:.0f} s on the GPU; the same command on the 2-core CPU "
                     f"machine: {rq['seconds_cpu']:.0f} s ({rq['cpu_reference']}).")
    return "\n".join(lines)


def write_gpu_doc(root=None):
    """Rewrite the table between docs/gpu.md's gpu-bench markers from docs/bench/h200.json; returns the path."""
    root = root or str(REPO_ROOT)
    path = os.path.join(root, "docs", "gpu.md")
    with open(os.path.join(root, "docs", "bench", "h200.json"), encoding="utf-8") as f:
        table = gpu_table(json.load(f))
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"<!-- gpu-bench:begin -->\n.*\n<!-- gpu-bench:end -->",
                  lambda m: f"<!-- gpu-bench:begin -->\n{table}\n<!-- gpu-bench:end -->", text, flags=re.S)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _torch_version():
    try:
        import torch           # optional: absent where torch is not installed
        return torch.__version__.split("+")[0]
    except ImportError:
        return ""


def profile(config="default", vocab_size=1200, steps=8, top=25, cpu_time=False, log=print):
    """cProfile of ``steps`` training steps (after a warm-up pass): the ``top`` functions by own time.
    ``cpu_time``: time with the process CPU clock, so other programs on a shared machine count less."""
    cfg = bench_config(config, vocab_size)
    batches = synthetic_batches(vocab_size)
    step = numpy_step_fn(cfg, model.init_params(cfg, 0))
    for b in batches:
        step(b)
    synchronize()
    prof = cProfile.Profile(time.process_time) if cpu_time else cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for i in range(steps):
        step(batches[i % len(batches)])
    synchronize()
    prof.disable()
    wall = time.perf_counter() - t0
    n_tok = sum(batches[i % len(batches)].n_tokens for i in range(steps))
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    log(f"{steps} training steps of {config!r} under cProfile: {wall:.2f} s wall, {n_tok / wall:.0f} target "
        f"tokens / s (the profiler slows Python calls); top {top} functions by own time:")
    log(out.getvalue())
    return stats


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m minihead.bench", description=__doc__.splitlines()[0])
    p.add_argument("--config", default="default",
                   help=f"a training preset or one of the benchmark's own: {', '.join(BENCH_CONFIGS)}")
    p.add_argument("--backend", choices=backend.BACKENDS, help="array backend (default: MINIHEAD_BACKEND or numpy)")
    p.add_argument("--vocab", type=int, default=1200)
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (the medians are over these)")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-autograd", action="store_true")
    p.add_argument("--no-relevance", action="store_true")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--shards", type=int, default=2,
                   help="also time the step split into this many row shards in processes (1: not at all)")
    p.add_argument("--heads", help="instead: time the step with these head counts a layer (e.g. 2,4,8), d_model kept")
    p.add_argument("--json", help="also write the numbers to this file")
    p.add_argument("--profile", action="store_true", help="profile the training step instead (cProfile)")
    p.add_argument("--cpu-time", action="store_true", help="with --profile: time by the process CPU clock")
    p.add_argument("--gpu-doc", action="store_true",
                   help="rewrite docs/gpu.md's table from docs/bench/h200.json (the shipped GPU record) and stop")
    a = p.parse_args(argv)
    if a.gpu_doc:
        print(write_gpu_doc())
        return
    if a.config not in PRESETS and a.config not in BENCH_CONFIGS:
        p.error(f"--config {a.config!r}: choose one of {', '.join([*PRESETS, *BENCH_CONFIGS])}")
    if a.vocab < 5:
        p.error(f"--vocab {a.vocab}: give at least 5 (four special tokens and a word)")
    if a.rounds < 1:
        p.error(f"--rounds {a.rounds}: give at least 1")
    if a.shards < 1:
        p.error(f"--shards {a.shards}: give at least 1")
    if a.json:
        folder = os.path.dirname(os.path.abspath(a.json))
        if os.path.isdir(a.json) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            p.error(f"--json {a.json}: not a file that can be written (its folder must exist and be writable)")
    if a.backend:
        try:
            backend.use(a.backend)
        except backend.BackendError as exc:
            p.error(str(exc))
    if a.profile:
        profile(a.config, a.vocab, cpu_time=a.cpu_time)
        return
    if a.heads:
        try:
            counts = [int(h) for h in a.heads.split(",")]
            result = heads_run(a.config, counts, a.vocab, a.rounds)
        except ValueError as exc:
            p.error(f"--heads {a.heads!r}: give whole numbers that divide d_model ({exc})")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(result, f, indent=1)
        return
    result = run(a.config, a.vocab, a.rounds, not a.no_torch, not a.no_autograd, not a.no_relevance,
                 not a.no_memory, a.shards)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
