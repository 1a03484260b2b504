"""A training step split over processes: the batch's rows cut into shards, the first computed by the calling
process and each other one by a worker process of its own, every shard with a one-thread BLAS, the shards'
gradients summed.

Why: NumPy's element-wise passes (softmax, LayerNorm, ReLU, dropout, the loss) run on one core whatever the
BLAS thread count, so with two BLAS threads the matrix products use both cores and the rest of the step uses
one (``python -m minihead.bench``: 37% of the GEMM rate at two threads, 52% at one). Two halves of a batch
computed side by side keep both cores busy through the whole step. Threads were tried first: NumPy releases
the GIL inside its ufuncs and BLAS calls, but the Python between them holds it, and two threads each ran their
half 13% slower than one alone (two processes: no slower), for a step 1.18x faster instead of 1.39x. This is
data parallelism inside one step, as on several GPUs, with processes for devices: the parameters live in one
shared-memory buffer that every process reads, each worker writes its gradients into a shared buffer of its
own, and only the batch, a seed and a few numbers go through the pipes.

It is the same step. The rows of a batch do not interact in the model (attention runs within a sequence,
LayerNorm within a token), and each shard's loss is averaged over the real target tokens of the WHOLE batch
(``n_norm``), so the loss, the gradients and the gate gradients are sums over shards:

    L = sum_s sum_{n in s} m_n l_n / sum_n m_n,   dL/dtheta = sum_s dL_s/dtheta.

Only the order of the float32 sums changes (the weight gradients' batch sums are split in two), so a sharded
run is not bit-identical to an unsharded one: ``shards`` is a training setting and part of the run folder's
name. Dropout: each shard draws its masks from its own generator, seeded by one draw per shard from the
step's generator, so the run stays deterministic and resumes exactly (only that generator's state is saved).
Every shard runs with BLAS at one thread, so a sharded step computes the same numbers at any BLAS thread count,
with or without the worker processes.

On CuPy the shards run one after the other in the calling process: the GPU is parallel already.
"""
import math
import mmap
import os
import signal
import tempfile
import traceback
import weakref
from dataclasses import replace

from . import backend, model
from .backend import xp
from .errors import TrainingError

_BLAS = []           # the threadpoolctl controller, made once (it scans the loaded libraries)


def _one_blas_thread():
    """A context in which BLAS uses one thread (each shard's process then does its own products)."""
    if not _BLAS:
        from threadpoolctl import ThreadpoolController
        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas")


# --------------------------------------------------------------------------- shared arrays
def _layout(arrays):
    """name -> (byte offset, shape, dtype) of ``arrays`` packed one after another (64-byte aligned), and the
    total size in bytes."""
    out, off = {}, 0
    for k in sorted(arrays):
        a = arrays[k]
        out[k] = (off, tuple(a.shape), str(a.dtype))
        off += -(-a.nbytes // 64) * 64
    return out, max(off, 64)


def _shared_file(size):
    """A new file of ``size`` bytes in shared memory (/dev/shm where there is one): its path and an mmap."""
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    fd, path = tempfile.mkstemp(prefix="minihead-shard-", dir=folder)
    try:
        os.ftruncate(fd, size)
        return path, mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _open_shared(path, size):
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _views(buf, layout):
    """The arrays of ``layout`` as views into the mmap ``buf``."""
    return {k: xp.frombuffer(buf, dtype=dt, count=math.prod(shape), offset=off).reshape(shape)
            for k, (off, shape, dt) in layout.items()}


# --------------------------------------------------------------------------- worker processes
def _worker(conn, cfg_dict, layout, size, params_path, grads_path):
    """A worker process: compute the shards it is sent on the shared parameters, write the gradients into its
    shared gradient buffer, send back (loss, nll_sum, dgates). Ctrl-C is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from threadpoolctl import threadpool_limits
    threadpool_limits(1, "blas")
    cfg = model.Config.from_dict(cfg_dict)
    params = _views(_open_shared(params_path, size), layout)
    grads_out = _views(_open_shared(grads_path, size), layout)
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            return
        shard, gates, seed, n_norm = msg
        try:
            rng = None if seed is None else backend.rng(seed)
            loss, grads, info = model.loss_and_grads(params, cfg, shard, gates, rng, n_norm=n_norm)
            for k, g in grads.items():
                grads_out[k][...] = g
            conn.send(("ok", loss, info["nll_sum"], info["dgates"], sorted(grads)))
        except Exception:                                   # sent to the parent, which raises it
            conn.send(("error", traceback.format_exc()))


class Workers:
    """``n_shards - 1`` worker processes that compute the shards beyond the first (the calling process computes
    the first). The parameters move into shared memory: the entries of ``params`` are replaced IN PLACE by views
    of one shared buffer, which the workers read, so an in-place update (Adam's) is what they compute with next
    step; replacing an entry by a new array is refused at the next step. Use as a context manager (or call
    :meth:`close`): the workers stop and ``params`` gets ordinary arrays back."""

    def __init__(self, params, cfg, n_shards):
        import multiprocessing as mp
        self.params = params
        self.layout, size = _layout(params)
        path, buf = _shared_file(size)
        views = _views(buf, self.layout)
        for k in self.layout:
            views[k][...] = params[k]
            params[k] = views[k]
        self.views, self.procs, self.conns, self.grads = views, [], [], []
        ctx = mp.get_context("spawn")                        # a fresh interpreter: no threads copied by fork
        paths = [path]
        try:
            for _ in range(n_shards - 1):
                gpath, gbuf = _shared_file(size)
                paths.append(gpath)
                self.grads.append(_views(gbuf, self.layout))
                here, there = ctx.Pipe()
                p = ctx.Process(target=_worker, args=(there, cfg.to_dict(), self.layout, size, path, gpath),
                                daemon=True, name="minihead-shard")
                p.start()
                self.procs.append(p)
                self.conns.append(here)
            for conn, p in zip(self.conns, self.procs):
                if _receive(conn, p) != "ready":
                    raise TrainingError(f"shard worker process {p.pid} did not start")
        except BaseException:
            _stop(self.procs, self.conns)
            self.close_views()
            raise
        finally:
            for p in paths:                                  # the mappings stay; nothing is left on disk
                os.unlink(p)
        self._finalizer = weakref.finalize(self, _stop, self.procs, self.conns)

    def check(self, params):
        for k, v in self.views.items():
            if params.get(k) is not v:
                raise TrainingError(f"parameter {k!r} was replaced by a new array; the shard workers see only "
                                    f"in-place updates of the shared one")

    def close(self):
        """Stop the workers and give ``params`` ordinary (unshared) arrays again."""
        self._finalizer()
        self.close_views()

    def close_views(self):
        for k, v in self.views.items():
            if self.params.get(k) is v:
                self.params[k] = v.copy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def workers_for(params, cfg, n_shards):
    """The worker processes of a sharded step on the active backend: :class:`Workers` for ``n_shards`` > 1 on
    NumPy; None for one shard, and on CuPy, where the shards run one after another in this process."""
    return Workers(params, cfg, n_shards) if n_shards > 1 and backend.name == "numpy" else None


def _receive(conn, proc):
    """The next message from a worker; a TrainingError if the worker process has died instead."""
    try:
        return conn.recv()
    except (EOFError, OSError):
        proc.join(timeout=1)
        raise TrainingError(f"shard worker process {proc.pid} exited (exit code {proc.exitcode})") from None


def _stop(procs, conns):
    for conn in conns:
        try:
            conn.send(None)
        except (OSError, ValueError):
            pass
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.terminate()


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


def loss_and_grads(params, cfg, batch, n_shards, gates=None, rng=None, workers=None):
    """:func:`minihead.model.loss_and_grads` of ``batch`` computed as ``n_shards`` row shards, each with BLAS at
    one thread: (loss, grads, info) with info's ``nll_sum`` and ``dgates`` summed over the shards (info has no
    forward cache). ``workers`` (a :class:`Workers` of ``n_shards - 1`` processes): the shards beyond the first
    run there while this process runs the first; without it they run here one after the other (the same
    numbers, slower). ``rng``: the step's dropout generator; it gives one seed to each shard."""
    shards = split(batch, n_shards)
    n_norm = float(max(batch.n_tokens, 1))                                 # the whole batch's real tokens
    seeds = [None] * len(shards)
    if rng is not None:
        seeds = [int(s) for s in rng.integers(0, 2 ** 63 - 1, size=len(shards))]
    remote = workers is not None and len(shards) > 1
    sent = []
    if remote:
        workers.check(params)
        for conn, proc, shard, seed in zip(workers.conns, workers.procs, shards[1:], seeds[1:]):
            try:
                conn.send((shard, gates, seed, n_norm))
            except OSError:                                  # a broken pipe: the worker has died
                _receive(conn, proc)
            sent.append((conn, proc))
    try:
        with _one_blas_thread():
            results = [model.loss_and_grads(params, cfg, shard, gates, None if seed is None else backend.rng(seed),
                                            n_norm=n_norm)
                       for shard, seed in zip(shards[:1] if remote else shards, seeds)]
    finally:
        replies = [_receive(conn, proc) for conn, proc in sent]  # always taken: none is left for the next step
    for i, reply in enumerate(replies):
        if reply[0] != "ok":
            raise TrainingError(f"shard {i + 2} of {len(shards)} failed in its worker process:\n{reply[1]}")
        _, loss_s, nll_s, dgates_s, keys = reply
        results.append((loss_s, {k: workers.grads[i][k] for k in keys}, {"nll_sum": nll_s, "dgates": dgates_s}))
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
