"""The project's benchmark: ``python -m minihead.bench [--config default]``.

Everything is measured side by side in one run, on the same batches, and reported as ratios:
- training-step throughput (target tokens a second) of our hand-written backward pass, beside the
  same forward differentiated by autograd, and beside PyTorch CPU eager on the identical architecture
  (when torch is installed; it is never a requirement);
- the cost of the dev-set relevance (LRP) pass against a forward plus backward pass over the same data;
- peak memory (resident set) of a training step of the configuration.
"""
import argparse
import resource
import time

from . import backend, model
from .data.vocab import make_batch
from .optim import Adam, clip_grad_norm


def synthetic_batches(vocab_size, n_batches=4, B=96, S=14, T=15, seed=0):
    """Random batches with the shape of data_small's (mean lengths ~13/14 tokens)."""
    gen = backend.rng(seed)
    out = []
    for _ in range(n_batches):
        src = [list(gen.integers(4, vocab_size, int(gen.integers(S - 4, S)))) for _ in range(B)]
        tgt = [list(gen.integers(4, vocab_size, int(gen.integers(T - 4, T)))) for _ in range(B)]
        out.append(make_batch(src, tgt, list(range(B))))
    return out


def _time(fn, batches, repeats):
    fn(batches[0])                                   # warm-up (allocations, BLAS threads)
    t0 = time.perf_counter()
    n_tok = 0
    for _ in range(repeats):
        for b in batches:
            fn(b)
            n_tok += b.n_tokens
    return n_tok / (time.perf_counter() - t0)


def numpy_step_fn(cfg, params):
    opt = Adam(params)
    gen = backend.rng(0)

    def step(b):
        loss, grads, _ = model.loss_and_grads(params, cfg, b, rng=gen)
        clip_grad_norm(grads, 1.0)
        opt.step(params, grads, 1e-4)
    return step


def autograd_step_fn(cfg, params):
    """The same forward, differentiated by autograd instead of our backward pass."""
    import autograd
    import autograd.numpy as anp
    opt = Adam(params)
    gen = backend.rng(0)

    def step(b):
        with backend.swapped(anp):
            grads = autograd.grad(lambda p: model.loss_forward(p, cfg, b, rng=gen)[0])(params)
        clip_grad_norm(grads, 1.0)
        opt.step(params, grads, 1e-4)
    return step


def torch_step_fn(cfg):
    """PyTorch CPU eager on the identical architecture (pre-norm, tied embeddings, same sizes)."""
    import math
    import torch
    import torch.nn.functional as F
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
            drop = lambda t: F.dropout(t, cfg.dropout, self.training)
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
            pos = torch.arange(T)[:, None] * torch.exp(-math.log(1e4) * torch.arange(0, d, 2) / d)
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

    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    h = backend.to_host

    def step(b):
        src, tgt_in, tgt_out = (torch.from_numpy(h(a)) for a in (b.src, b.tgt_in, b.tgt_out))
        sm, tm = torch.from_numpy(h(b.src_mask)), torch.from_numpy(h(b.tgt_mask))
        logits = net(src, sm, tgt_in, tm)
        loss = F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), reduction="none",
                               label_smoothing=cfg.label_smoothing)
        loss = (loss * tm.reshape(-1)).sum() / tm.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
    return step, torch.get_num_threads()


def relevance_ratio(cfg, params, batches, repeats=1):
    """Seconds of the relevance pass / seconds of a forward + backward pass, same batches."""
    from . import lrp
    fb = _time(lambda b: model.loss_and_grads(params, cfg, b), batches, repeats)
    rel = _time(lambda b: lrp.relevance(params, cfg, b), batches, repeats)
    return fb / rel


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run(config="default", vocab_size=1200, repeats=2, with_torch=True, with_autograd=True,
        with_relevance=True, log=print):
    from .train import preset
    cfg, _ = preset(config, vocab_size)
    batches = synthetic_batches(vocab_size)
    rows = {}
    log(f"config {config!r}: {cfg.n_enc_layers}+{cfg.n_dec_layers} layers x {cfg.n_heads} heads, d_model "
        f"{cfg.d_model}, d_ff {cfg.d_ff}, vocabulary {vocab_size}; {len(batches)} batches of "
        f"~{batches[0].n_tokens} target tokens; backend {backend.name}")
    rows["minihead (hand-written backward)"] = _time(numpy_step_fn(cfg, model.init_params(cfg, 0)), batches, repeats)
    rss = peak_rss_mib()
    if with_autograd and backend.name == "numpy":
        rows["same forward, autograd backward"] = _time(autograd_step_fn(cfg, model.init_params(cfg, 0)),
                                                       batches, max(1, repeats // 2))
    if with_torch:
        try:
            step, threads = torch_step_fn(cfg)
            rows[f"PyTorch CPU eager ({threads} threads)"] = _time(step, batches, repeats)
        except ImportError:
            log("torch not installed: PyTorch comparison skipped (pip install torch==2.13.0)")
    ours = rows["minihead (hand-written backward)"]
    log("\ntraining step throughput (target tokens / s), measured side by side:")
    for name, tps in rows.items():
        log(f"  {name:<42s} {tps:9.0f} tok/s   minihead / this = {ours / tps:5.2f}x")
    log(f"peak resident memory after the minihead steps: {rss:.0f} MiB")
    result = {"throughput": rows, "peak_rss_mib": rss}
    if with_relevance:
        try:
            ratio = relevance_ratio(cfg, model.init_params(cfg, 0), batches)
            log(f"relevance (LRP) pass / (forward + backward) pass: {ratio:.2f}x (budget 3x)")
            result["relevance_ratio"] = ratio
        except (ImportError, AttributeError) as exc:
            log(f"relevance pass not measured: {exc}")
    return result


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m minihead.bench", description=__doc__.splitlines()[0])
    p.add_argument("--config", default="default")
    p.add_argument("--vocab", type=int, default=1200)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-autograd", action="store_true")
    p.add_argument("--no-relevance", action="store_true")
    a = p.parse_args(argv)
    run(a.config, a.vocab, a.repeats, not a.no_torch, not a.no_autograd, not a.no_relevance)


if __name__ == "__main__":
    main()
