"""A training step split over threads: the batch's rows cut into shards, each shard's forward and backward
pass run in a thread of its own with a one-thread BLAS, and the shards' gradients summed.

Why: NumPy's element-wise passes (softmax, LayerNorm, ReLU, dropout, the loss) run on one core whatever the
BLAS thread count, so with two BLAS threads the matrix products use both cores and the rest of the step uses
one (``python -m minihead.bench``: 38% of the GEMM rate at two threads, 52% at one). NumPy releases the GIL
inside its ufuncs and BLAS calls, so two threads working on two halves of a batch keep both cores busy through
the whole step. This is data parallelism inside one step, as on several GPUs, with threads for devices.

It is the same step. The rows of a batch do not interact in the model (attention runs within a sequence,
LayerNorm within a token), and each shard's loss is averaged over the real target tokens of the WHOLE batch
(``n_norm``), so the loss, the gradients and the gate gradients are sums over shards:

    L = sum_s sum_{n in s} m_n l_n / sum_n m_n,   dL/dtheta = sum_s dL_s/dtheta.

Only the order of the float32 sums changes (the weight gradients' batch sums are split in two), so a sharded
run is not bit-identical to an unsharded one: ``shards`` is a training setting and part of the run folder's
name. Dropout: each shard draws its masks from its own generator, seeded by one draw per shard from the
step's generator, so the run stays deterministic and resumes exactly (only that generator's state is saved).
Each shard pins BLAS to one thread, so a sharded step computes the same numbers at any BLAS thread count.

On CuPy the shards run one after the other in the calling thread: the GPU is parallel already.
"""
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from . import backend, model

_POOLS = {}          # shard count -> ThreadPoolExecutor, made once per process
_BLAS = []           # the threadpoolctl controller, made once (it scans the loaded libraries)


def _pool(n):
    if n not in _POOLS:
        _POOLS[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="minihead-shard")
    return _POOLS[n]


def _one_blas_thread():
    """A context in which BLAS uses one thread (each shard's thread then does its own products)."""
    if not _BLAS:
        from threadpoolctl import ThreadpoolController
        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas")


def in_threads(fn, items):
    """``[fn(item) for item in items]``, each call in a thread of the pool (in the calling thread on CuPy or
    for a single item). The calls must touch disjoint arrays; results come back in the items' order."""
    if backend.name != "numpy" or len(items) < 2:
        return [fn(item) for item in items]
    return list(_pool(len(items)).map(fn, items))


def split(batch, n):
    """The batch's rows in ``min(n, B)`` contiguous shards of near-equal size (Batches with the same padded
    widths; ``n_tokens`` and ``index`` are each shard's own)."""
    B = batch.src.shape[0]
    n = max(1, min(n, B))
    bounds = [round(i * B / n) for i in range(n + 1)]
    out = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        tgt_mask = batch.tgt_mask[a:b]                                     # (b - a, T)
        out.append(replace(batch, src=batch.src[a:b], src_mask=batch.src_mask[a:b], tgt_in=batch.tgt_in[a:b],
                           tgt_out=batch.tgt_out[a:b], tgt_mask=tgt_mask, n_tokens=int(tgt_mask.sum()),
                           index=batch.index[a:b]))
    return out


def loss_and_grads(params, cfg, batch, n_shards, gates=None, rng=None):
    """:func:`minihead.model.loss_and_grads` of ``batch`` computed as ``n_shards`` shards in parallel threads:
    (loss, grads, info) with info's ``nll_sum`` and ``dgates`` summed over the shards (info has no forward
    cache). ``rng``: the step's dropout generator; it gives one seed to each shard."""
    shards = split(batch, n_shards)
    n_norm = float(max(int(batch.tgt_mask.sum()), 1))                     # the whole batch's real tokens
    rngs = [None] * len(shards)
    if rng is not None:
        rngs = [backend.rng(int(s)) for s in rng.integers(0, 2 ** 63 - 1, size=len(shards))]

    def run(i):
        return model.loss_and_grads(params, cfg, shards[i], gates, rngs[i], n_norm=n_norm)
    with _one_blas_thread():
        results = in_threads(run, list(range(len(shards))))
    loss, grads, info = results[0]
    dgates = info["dgates"]
    nll_sum = info["nll_sum"]

    for loss_s, grads_s, info_s in results[1:]:                           # summed in shard order: deterministic
        for k, g in grads_s.items():
            grads[k] += g
        loss = loss + loss_s
        nll_sum = nll_sum + info_s["nll_sum"]
        if dgates is not None:
            for k, g in info_s["dgates"].items():
                if g is not None:
                    dgates[k] += g
    return loss, grads, {"nll_sum": nll_sum, "dgates": dgates, "cache": None}
