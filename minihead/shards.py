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

Failure paths: the shared buffers are files without a name in /dev/shm (nothing to remove, however the
parent ends), sized and checked against its free space before they are made, their pages reserved at once
(a full /dev/shm is a SharedMemoryError, not a SIGBUS); each worker says "ready" within a timeout or the
start-up fails naming the shard, its pid and exit code; workers start with Ctrl-C blocked (it is the
parent's) and end quietly when the parent has gone (their pipe is closed).
"""
import contextlib
import errno
import math
import mmap
import os
import signal
import tempfile
import threading
import time
import traceback
import multiprocessing as mp
import weakref
from dataclasses import replace
from multiprocessing import reduction, resource_tracker

from threadpoolctl import ThreadpoolController, threadpool_limits

from . import backend, model
from .backend import xp
from .errors import TrainingError

_BLAS = []           # the threadpoolctl controller, made once (it scans the loaded libraries)
START_TIMEOUT = 60.0   # seconds a worker process may take to start (a fresh interpreter importing NumPy: ~0.5 s)
RESUME = "python -m minihead train ... --resume"


class SharedMemoryError(TrainingError):
    """The shared-memory folder (/dev/shm) has too little free space for the sharded step's buffers."""


def _one_blas_thread():
    """A context in which BLAS uses one thread (each shard's process then does its own products)."""
    if not _BLAS:
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


def _shm_folder():
    """Where the shared buffers live: /dev/shm where there is one, else the temporary folder."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def _free_bytes(folder):
    """The bytes an unprivileged process can still write in ``folder``'s file system."""
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def _space_message(folder, need, free, n_shards):
    return (f"{folder} has {free:,} bytes free but the sharded step (shards={n_shards}) needs {need:,} for its "
            f"shared buffers (the parameters and {n_shards - 1} gradient buffer(s)); use shards=1 or free space "
            f"in {folder}")


def _need(size, n_shards):
    """The bytes of shared memory a sharded step takes: one parameter buffer and ``n_shards - 1`` gradient
    buffers of ``size`` bytes, each in whole pages."""
    return n_shards * (-(-size // mmap.PAGESIZE) * mmap.PAGESIZE)


def _check_space(folder, size, n_shards):
    """Refuse, before anything is allocated, buffers that ``folder`` cannot hold: a file in shared memory that
    outgrows its file system kills the process that touches the missing page with SIGBUS, and no message."""
    need = _need(size, n_shards)
    free = _free_bytes(folder)
    if need > free:
        raise SharedMemoryError(_space_message(folder, need, free, n_shards))


def _shared_file(folder, size, n_shards):
    """A new file of ``size`` bytes in shared memory with no name: its descriptor (handed to the workers as they
    start) and an mmap. With no name, nothing is left in ``folder`` however this process ends (killed
    included): the memory goes when the last process that maps it does. Where the file system cannot make a
    nameless file (``O_TMPFILE``), the named file is removed at once, with SIGINT, SIGTERM and SIGHUP held back
    meanwhile. Its pages are reserved here (``posix_fallocate``): a full /dev/shm is an error now, not a
    SIGBUS later."""
    fd = None
    if hasattr(os, "O_TMPFILE"):
        with contextlib.suppress(OSError):
            fd = os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o600)
    if fd is None:
        held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
        try:
            fd, path = tempfile.mkstemp(prefix="minihead-shard-", dir=folder)
            os.unlink(path)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
    try:
        os.ftruncate(fd, size)
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise SharedMemoryError(_space_message(folder, _need(size, n_shards),
                                                       _free_bytes(folder), n_shards)) from None
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
        return fd, mmap.mmap(fd, size)
    except BaseException:
        os.close(fd)
        raise


def _map(fd, size):
    """The mmap of an inherited shared file's descriptor (closed: the mapping keeps the memory)."""
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _views(buf, layout):
    """The arrays of ``layout`` as views into the mmap ``buf``."""
    return {k: xp.frombuffer(buf, dtype=dt, count=math.prod(shape), offset=off).reshape(shape)
            for k, (off, shape, dt) in layout.items()}


class _Inherited:
    """A file descriptor a spawned worker process inherits as it starts, as multiprocessing hands over a pipe's
    end: pickled with the process's arguments, it is passed to the new interpreter under the same number."""

    def __init__(self, fd):
        self.fd = fd

    def __reduce__(self):
        return _inherited_fd, (reduction.DupFd(self.fd),)


def _inherited_fd(dup):
    return dup.detach()


@contextlib.contextmanager
def _ctrl_c_held():
    """While a worker process starts: SIGINT blocked in this thread, so the new process starts with it blocked
    (Ctrl-C is the parent's to handle; a worker still importing NumPy prints no KeyboardInterrupt traceback),
    and a Ctrl-C that arrives meanwhile raised once the start is complete, not halfway through it."""
    got = []
    old_handler = None
    if threading.current_thread() is threading.main_thread():
        old_handler = signal.getsignal(signal.SIGINT)
        if callable(old_handler):
            signal.signal(signal.SIGINT, lambda *a: got.append(a))
        else:
            old_handler = None
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)
            if got:
                old_handler(*got[0])


# --------------------------------------------------------------------------- worker processes
def _worker(conn, cfg_dict, layout, size, params_fd, grads_fd):
    """A worker process: map the shared parameters and its gradient buffer (inherited descriptors), say
    "ready", then compute the shards it is sent, write the gradients into its buffer and send back (loss,
    nll_sum, dgates). Ctrl-C is the parent's to handle (SIGINT is ignored here). A parent that has gone (the
    pipe closed: killed, or ended without stopping the workers) ends the worker quietly, without a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        try:
            threadpool_limits(1, "blas")
            cfg = model.Config.from_dict(cfg_dict)
            params = _views(_map(params_fd, size), layout)
            grads_out = _views(_map(grads_fd, size), layout)
        except Exception:                                    # sent to the parent, which raises it
            conn.send(("error", traceback.format_exc()))
            return
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
                reply = ("ok", loss, info["nll_sum"], info["dgates"], sorted(grads))
            except Exception:                               # sent to the parent, which raises it
                reply = ("error", traceback.format_exc())
            conn.send(reply)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return                                              # the parent has gone: nothing to report to


def _how(exitcode):
    if exitcode is not None and exitcode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


class Workers:
    """``n_shards - 1`` worker processes that compute the shards beyond the first (the calling process computes
    the first). The parameters move into shared memory: the entries of ``params`` are replaced IN PLACE by views
    of one shared buffer, which the workers read, so an in-place update (Adam's) is what they compute with next
    step; replacing an entry by a new array is refused at the next step. Use as a context manager (or call
    :meth:`close`): the workers stop and ``params`` gets ordinary arrays back.

    Start-up: the buffers are sized and checked against the free space of /dev/shm before anything is
    allocated (:class:`SharedMemoryError`); they are files without a name, so nothing is left in /dev/shm
    whatever ends this process. Each worker says "ready" once it has mapped them; one that dies first, or is
    not ready within ``start_timeout`` seconds, is a TrainingError naming the shard, the worker's pid and exit
    code, and every worker is stopped. ``run_dir`` (the run folder, where known) is named in the errors of a
    dying worker, with the command that resumes the run."""

    def __init__(self, params, cfg, n_shards, run_dir=None, start_timeout=START_TIMEOUT):
        self.params, self.n_shards, self.run_dir = params, n_shards, run_dir
        self.layout, size = _layout(params)
        self.folder = _shm_folder()
        self.views, self.procs, self.conns, self.grads = {}, [], [], []
        _check_space(self.folder, size, n_shards)          # before anything is allocated
        fds = []
        try:
            fd, buf = _shared_file(self.folder, size, n_shards)
            fds.append(fd)
            for _ in range(n_shards - 1):
                gfd, gbuf = _shared_file(self.folder, size, n_shards)
                fds.append(gfd)
                self.grads.append(_views(gbuf, self.layout))
            views = _views(buf, self.layout)
            for k in self.layout:
                views[k][...] = params[k]
                params[k] = views[k]
            self.views = views
            ctx = mp.get_context("spawn")                    # a fresh interpreter: no threads copied by fork
            resource_tracker.ensure_running()                # started here: its start unblocks SIGINT
            for i, gfd in enumerate(fds[1:]):
                here, there = ctx.Pipe()
                p = ctx.Process(target=_worker, args=(there, cfg.to_dict(), self.layout, size, _Inherited(fd),
                                                      _Inherited(gfd)),
                                daemon=True, name=f"minihead-shard-{i + 2}")
                try:
                    with _ctrl_c_held():
                        p.start()
                        self.procs.append(p)
                        self.conns.append(here)
                finally:
                    there.close()                             # the worker's end is the worker's alone: its death
                    if p not in self.procs:                   # is an end of file here, not a silent pipe
                        here.close()
            deadline = time.monotonic() + start_timeout
            for i in range(len(self.procs)):
                self._await_ready(i, deadline, start_timeout)
        except BaseException:
            _stop(self.procs, self.conns, wait=0)
            self.close_views()
            raise
        finally:
            for f in fds:                                    # the mappings (and the workers' copies) stay
                os.close(f)
        self._finalizer = weakref.finalize(self, _stop, self.procs, self.conns)

    def _await_ready(self, i, deadline, timeout):
        conn, p = self.conns[i], self.procs[i]
        while not conn.poll(0.05):
            if p.exitcode is not None:
                break
            if time.monotonic() > deadline:
                raise TrainingError(f"shard {i + 2} of {self.n_shards}: shard worker process {p.pid} did not "
                                    f"start within {timeout:g} s{self._where()}")
        try:
            reply = conn.recv()
        except (EOFError, OSError):
            reply = None
        if reply == "ready":
            return
        if isinstance(reply, tuple) and reply[0] == "error":
            raise TrainingError(f"shard {i + 2} of {self.n_shards}: shard worker process {p.pid} failed to "
                                f"start:\n{reply[1]}")
        raise self._died(i, "during start-up")

    def _where(self):
        """Where the run stands, for a message about a worker (empty without ``run_dir``)."""
        if not self.run_dir:
            return ""
        if os.path.exists(os.path.join(self.run_dir, "last.npz")):
            return f"; the run in {self.run_dir} continues from its last save with: {RESUME}"
        return f"; nothing of the run in {self.run_dir} was saved yet: run the same command again"

    def _died(self, i, when):
        """The error for worker ``i`` that has exited: a /dev/shm that ran out of pages (SIGBUS) as such."""
        p = self.procs[i]
        p.join(timeout=1)
        who = f"shard {i + 2} of {self.n_shards}: shard worker process {p.pid}"
        if p.exitcode == -signal.SIGBUS:
            return SharedMemoryError(f"{who} was killed by SIGBUS {when}: {self.folder} ran out of space "
                                     f"({_free_bytes(self.folder):,} bytes free); use shards=1 or free space in "
                                     f"{self.folder}{self._where()}")
        return TrainingError(f"{who} exited {when} ({_how(p.exitcode)}){self._where()}")

    def receive(self, i):
        """The next message from worker ``i``; a TrainingError if the worker process has died instead."""
        try:
            return self.conns[i].recv()
        except (EOFError, OSError):
            raise self._died(i, "during a training step") from None

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


def workers_for(params, cfg, n_shards, run_dir=None):
    """The worker processes of a sharded step on the active backend: :class:`Workers` for ``n_shards`` > 1 on
    NumPy; None for one shard, and on CuPy, where the shards run one after another in this process.
    ``run_dir``: the run folder, named (with the resume command) when a worker dies."""
    if n_shards > 1 and backend.name == "numpy":
        return Workers(params, cfg, n_shards, run_dir=run_dir)
    return None


def _stop(procs, conns, wait=5):
    """Ask every worker to end, wait up to ``wait`` seconds for them all, then terminate the rest."""
    for conn in conns:
        with contextlib.suppress(OSError, ValueError):
            conn.send(None)
        conn.close()                                         # a worker still starting: its "ready" finds no reader
    deadline = time.monotonic() + wait
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.terminate()
            p.join(timeout=5)


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
        for i, (conn, shard, seed) in enumerate(zip(workers.conns, shards[1:], seeds[1:])):
            try:
                conn.send((shard, gates, seed, n_norm))
            except OSError:                                  # a broken pipe: the worker has died
                workers.receive(i)
            sent.append(i)
    try:
        with _one_blas_thread():
            results = [model.loss_and_grads(params, cfg, shard, gates, None if seed is None else backend.rng(seed),
                                            n_norm=n_norm)
                       for shard, seed in zip(shards[:1] if remote else shards, seeds)]
    finally:
        replies = [workers.receive(i) for i in sent]  # always taken: none is left for the next step
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
