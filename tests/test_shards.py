"""The sharded training step (minihead/shards.py): the same loss and gradients as the whole batch's, computed in
worker processes or one shard after another.

A batch's rows do not interact in the model and each shard's loss is averaged over the whole batch's real
target tokens, so with shards s of the rows

    L = sum_s sum_{n in s} m_n l_n / sum_n m_n   and   dL/dtheta = sum_s dL_s/dtheta, dL/dg = sum_s dL_s/dg.

In float64 without dropout the sharded step must match model.loss_and_grads to rounding; in float32 it must
be deterministic (same seed, same bits) with or without the worker processes, whatever the BLAS thread count
outside it.
"""
import dataclasses
import re
import glob
import os

import numpy as np
import pytest

from minihead import backend, bench, model, shards
from minihead.errors import TrainingError


def _cfg(dtype, dropout=0.0):
    return model.Config(vocab_size=40, n_enc_layers=2, n_dec_layers=2, n_heads=2, d_model=8, d_ff=12,
                        dropout=dropout, label_smoothing=0.1, dtype=dtype)


def _batch(B=7):
    return bench.synthetic_batches(40, n_batches=1, B=B, S=9, T=8, seed=3)[0]


def test_split_covers_every_row_once():
    """split(batch, n): min(n, B) contiguous shards of near-equal size whose rows, tokens and indices are the
    batch's, in order."""
    b = _batch(7)
    for n in (1, 2, 3, 7, 12):
        parts = shards.split(b, n)
        assert len(parts) == min(n, 7)
        assert max(len(p.index) for p in parts) - min(len(p.index) for p in parts) <= 1
        assert np.array_equal(np.concatenate([p.src for p in parts]), b.src)
        assert np.array_equal(np.concatenate([p.tgt_mask for p in parts]), b.tgt_mask)
        assert sum(p.n_tokens for p in parts) == b.n_tokens
        assert sum((p.index for p in parts), []) == b.index


@pytest.mark.parametrize("n, processes", [(2, True), (3, True), (3, False), (7, False)])
def test_sharded_gradients_equal_the_batch_gradients(n, processes):
    """float64, no dropout, gates on all three attention types: the sharded loss, nll sum, every parameter
    gradient and every gate gradient equal model.loss_and_grads's to 1e-12 relative to the array's largest
    entry, plus 1e-15 (the key biases' gradients are zero in theory, roundoff of 1e-18 in practice); with the
    shards beyond the first in worker processes, and one after another in this process."""
    cfg = _cfg("float64")
    params = model.init_params(cfg, seed=2)
    gen = np.random.default_rng(0)
    gates = {k: gen.uniform(0.3, 1.0, (2, 2)) for k in model.GATE_KINDS}
    b = _batch(7)
    loss, grads, info = model.loss_and_grads(params, cfg, b, gates)
    if processes:
        with shards.Workers(params, cfg, n) as workers:
            loss_s, grads_s, info_s = shards.loss_and_grads(params, cfg, b, n, gates, workers=workers)
    else:
        loss_s, grads_s, info_s = shards.loss_and_grads(params, cfg, b, n, gates)
    assert abs(float(loss) - float(loss_s)) < 1e-12 * abs(float(loss))
    assert abs(float(info["nll_sum"]) - float(info_s["nll_sum"])) < 1e-12 * abs(float(info["nll_sum"]))
    assert set(grads_s) == set(grads)
    for k in grads:
        assert np.abs(grads[k] - grads_s[k]).max() <= 1e-12 * np.abs(grads[k]).max() + 1e-15, k
    for k in model.GATE_KINDS:
        assert np.abs(info["dgates"][k] - info_s["dgates"][k]).max() <= 1e-12 * np.abs(info["dgates"][k]).max(), k


def test_sharded_step_is_deterministic_at_any_blas_thread_count():
    """float32 with dropout: the same generator state gives bit-identical loss and gradients, with BLAS at
    one thread or at two outside the step (every shard runs with BLAS at one thread), with the second shard in
    a worker process or in this one; the step generator moves on by one draw per shard (so a checkpoint of its
    state resumes the same masks)."""
    from threadpoolctl import threadpool_limits
    cfg = _cfg("float32", dropout=0.2)
    params = model.init_params(cfg, seed=2)
    b = _batch(7)
    runs = []
    with shards.Workers(params, cfg, 2) as workers:
        for threads, w in ((1, None), (2, None), (1, workers), (2, workers)):
            gen = backend.rng(4)
            with threadpool_limits(threads, "blas"):
                loss, grads, _ = shards.loss_and_grads(params, cfg, b, 2, rng=gen, workers=w)
            runs.append((float(loss), {k: g.copy() for k, g in grads.items()}, gen.bit_generator.state))
    for loss, grads, state in runs[1:]:
        assert loss == runs[0][0] and state == runs[0][2]
        assert all(np.array_equal(grads[k], runs[0][1][k]) for k in grads)
    moved = backend.rng(4)
    moved.integers(0, 2 ** 63 - 1, size=2)
    assert runs[0][2] == moved.bit_generator.state
    other = shards.loss_and_grads(params, cfg, b, 2, rng=backend.rng(5))[0]
    assert float(other) != runs[0][0], "another dropout seed gives another loss"


def test_workers_share_in_place_updates_refuse_replaced_arrays_and_clean_up():
    """Workers move the parameters into shared memory: an in-place update in this process is what the worker
    computes with (its shard's gradient follows the change), an entry replaced by a new array is refused with
    a TrainingError naming it, a failing worker's error names the shard and carries the worker's traceback, a
    failure in this process's shard leaves no reply behind for the next step, and close() gives params ordinary arrays with the same values and leaves no file in shared memory."""
    cfg = _cfg("float64")
    params = model.init_params(cfg, seed=2)
    before = {k: v.copy() for k, v in params.items()}
    b = _batch(6)
    with shards.Workers(params, cfg, 2) as workers:
        assert not glob.glob(os.path.join("/dev/shm", "minihead-shard-*")), "the files are unlinked at start"
        loss0 = float(shards.loss_and_grads(params, cfg, b, 2, workers=workers)[0])
        params["enc0.ffn.W1"] *= 1.5                          # in place: the worker sees it
        loss1 = float(shards.loss_and_grads(params, cfg, b, 2, workers=workers)[0])
        params_copy = {k: v.copy() for k, v in params.items()}
        assert loss1 == pytest.approx(float(model.loss_and_grads(params_copy, cfg, b)[0]), rel=1e-12)
        assert loss1 != loss0
        bad = dataclasses.replace(b, src=b.src.copy())
        bad.src[-1, 0] = 999                                  # out of the vocabulary, in the worker's shard only
        with pytest.raises(TrainingError, match="(?s)shard 2 of 2 failed in its worker process:.*IndexError"):
            shards.loss_and_grads(params, cfg, bad, 2, workers=workers)
        with pytest.raises(ValueError):                       # a failure here: the worker's reply is still taken
            shards.loss_and_grads(params, cfg, b, 2, gates={"enc": np.ones((9, 9))}, workers=workers)
        assert float(shards.loss_and_grads(params, cfg, b, 2, workers=workers)[0]) == loss1, "no stale reply"
        params["enc0.ffn.W1"] = params["enc0.ffn.W1"].copy()  # replaced: the worker would not see it
        with pytest.raises(TrainingError, match="'enc0.ffn.W1' was replaced by a new array"):
            shards.loss_and_grads(params, cfg, b, 2, workers=workers)
    assert all(type(v) is np.ndarray and v.base is None for v in params.values())
    assert np.array_equal(params["enc1.ffn.W1"], before["enc1.ffn.W1"])
    assert np.array_equal(params["enc0.ffn.W1"], before["enc0.ffn.W1"] * 1.5)


def test_a_dead_worker_is_a_clear_error():
    """A worker process that dies (killed here) makes the next sharded step raise a TrainingError that names
    it as exited, instead of hanging on its pipe; closing the workers afterwards still gives params back."""
    cfg = _cfg("float64")
    params = model.init_params(cfg, seed=2)
    with shards.Workers(params, cfg, 2) as workers:
        workers.procs[0].kill()
        workers.procs[0].join()
        with pytest.raises(TrainingError, match=r"shard worker process \d+ exited"):
            shards.loss_and_grads(params, cfg, _batch(6), 2, workers=workers)
    assert all(type(v) is np.ndarray and v.base is None for v in params.values())


# --------------------------------------------------------------------------- failure paths: nothing hangs or leaks
def _exit_at_start(*args):
    """A worker that dies before it has mapped anything (as one killed by the OOM killer would)."""
    os._exit(3)


def _hang_at_start(*args):
    """A worker that never says ready."""
    import time
    time.sleep(60)


def _shm_files():
    return set(glob.glob(os.path.join("/dev/shm", "minihead-shard-*")))


def _gone(pid):
    """True once process ``pid`` has ended (a zombie not yet reaped by its new parent counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _pid_of(exc):
    import re
    return int(re.search(r"shard worker process (\d+)", str(exc)).group(1))


def _no_worker_left(before_files):
    import multiprocessing
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("minihead-shard")]
    assert _shm_files() <= before_files, "no file left in /dev/shm"


def test_a_worker_dying_at_start_up_is_a_clear_error_not_a_hang(tmp_path, monkeypatch):
    """A worker process that dies before it is ready (exit status 3 here) makes Workers raise, at once, a
    one-line TrainingError naming the shard, the worker's pid and exit code, the run folder and the resume
    command (its last.npz exists); params get ordinary arrays back, no worker process and no /dev/shm file is
    left. Through train(): the same error, and the run folder's run.lock is released."""
    import time

    from minihead.train import Corpus, TrainConfig, train
    monkeypatch.setattr(shards, "_worker", _exit_at_start)
    cfg = _cfg("float64")
    params = model.init_params(cfg, seed=2)
    files = _shm_files()
    (tmp_path / "last.npz").write_bytes(b"")
    t0 = time.monotonic()
    with pytest.raises(TrainingError) as info:
        shards.Workers(params, cfg, 3, run_dir=str(tmp_path))
    msg = str(info.value)
    assert time.monotonic() - t0 < 20
    assert "\n" not in msg
    assert re.fullmatch(rf"shard 2 of 3: shard worker process \d+ exited during start-up \(exit code 3\); the run "
                        rf"in {re.escape(str(tmp_path))} continues from its last save with: python -m minihead "
                        rf"train \.\.\. --resume", msg), msg
    assert _gone(_pid_of(info.value))
    assert all(type(v) is np.ndarray and v.base is None for v in params.values())
    _no_worker_left(files)

    pairs = [(["a", "b", "c"], ["C", "B", "A"]), (["b", "c"], ["C", "B"])] * 4
    c = Corpus.build(pairs, pairs[:2])
    out = tmp_path / "run"
    tcfg = TrainConfig(max_steps=2, eval_every=2, max_tokens=200, shards=2)
    mcfg = model.Config(vocab_size=len(c.vocab), n_enc_layers=1, n_dec_layers=1, n_heads=2, d_model=8, d_ff=12)
    with pytest.raises(TrainingError, match=r"^shard 2 of 2: shard worker process \d+ exited during start-up "
                                            r"\(exit code 3\)"):
        train(c, mcfg, tcfg, str(out), progress=False)
    assert not (out / "run.lock").exists()
    _no_worker_left(files)


def test_a_worker_that_never_gets_ready_times_out(monkeypatch):
    """A worker process that does not say ready within start_timeout seconds is a one-line TrainingError
    naming the shard, the pid and the timeout (no run folder given: none named); the worker is stopped."""
    import time
    monkeypatch.setattr(shards, "_worker", _hang_at_start)
    cfg = _cfg("float64")
    files = _shm_files()
    t0 = time.monotonic()
    with pytest.raises(TrainingError, match=r"^shard 2 of 2: shard worker process \d+ did not start within "
                                            r"1.5 s$") as info:
        shards.Workers(model.init_params(cfg, seed=2), cfg, 2, start_timeout=1.5)
    assert time.monotonic() - t0 < 8
    assert _gone(_pid_of(info.value))
    _no_worker_left(files)


def test_a_full_dev_shm_is_refused_before_anything_is_allocated(tmp_path, monkeypatch):
    """Too little free space in /dev/shm for the parameter buffer and the gradient buffers is a one-line
    SharedMemoryError (a MiniheadError) naming the folder, the bytes needed and free, and saying to use
    shards=1 or free space; it comes before any buffer is made or worker started (params untouched). A
    reservation refused by the file system (ENOSPC from posix_fallocate) is the same error, not a SIGBUS."""
    import errno

    from minihead.errors import MiniheadError
    cfg = _cfg("float64")
    params = model.init_params(cfg, seed=2)
    before = dict(params)
    files = _shm_files()
    monkeypatch.setattr(shards, "_free_bytes", lambda folder: 1000)

    def no_allocation(*a):
        raise AssertionError("a buffer was allocated")
    monkeypatch.setattr(shards, "_shared_file", no_allocation)
    with pytest.raises(shards.SharedMemoryError) as info:
        shards.Workers(params, cfg, 3, run_dir=str(tmp_path))
    assert isinstance(info.value, MiniheadError)
    size = shards._need(shards._layout(params)[1], 3)
    assert re.fullmatch(rf"/dev/shm has 1,000 bytes free but the sharded step \(shards=3\) needs {size:,} for "
                        rf"its shared buffers \(the parameters and 2 gradient buffer\(s\)\); use shards=1 or free "
                        rf"space in /dev/shm", str(info.value))
    assert all(params[k] is before[k] for k in params)
    monkeypatch.undo()

    def enospc(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", enospc)
    with pytest.raises(shards.SharedMemoryError, match=r"^/dev/shm has [\d,]+ bytes free but the sharded step "
                                                       r"\(shards=2\) needs [\d,]+ .*use shards=1 or free space"):
        shards.Workers(params, cfg, 2)
    assert all(params[k] is before[k] for k in params)
    _no_worker_left(files)


def test_a_worker_killed_by_sigbus_names_dev_shm_and_the_run(tmp_path):
    """A worker killed by SIGBUS (what touching a page of a full /dev/shm does) is reported as /dev/shm having
    run out of space, not as "exit code -7"; a worker dying with no save in the run folder yet says that
    nothing of the run was saved and to run the same command again."""
    import signal
    cfg = _cfg("float64")
    params = model.init_params(cfg, seed=2)
    with shards.Workers(params, cfg, 2, run_dir=str(tmp_path)) as workers:
        os.kill(workers.procs[0].pid, signal.SIGBUS)
        workers.procs[0].join()
        with pytest.raises(shards.SharedMemoryError) as info:
            shards.loss_and_grads(params, cfg, _batch(6), 2, workers=workers)
    msg = str(info.value)
    # "-7" is the raw exit code; the run folder's own path may contain "-7" (pytest-7x), so it is left out
    assert "\n" not in msg and "-7" not in msg.replace(str(tmp_path), "")
    assert re.fullmatch(rf"shard 2 of 2: shard worker process \d+ was killed by SIGBUS during a training step: "
                        rf"/dev/shm ran out of space \([\d,]+ bytes free\); use shards=1 or free space in /dev/shm; "
                        rf"nothing of the run in {re.escape(str(tmp_path))} was saved yet: run the same command "
                        rf"again", msg), msg


def test_workers_start_with_ctrl_c_blocked():
    """Each worker process starts with SIGINT blocked (inherited from the start-up, so Ctrl-C cannot raise
    KeyboardInterrupt in a worker still importing NumPy; the parent handles it) and ignored once running; the
    parent's own SIGINT handler and signal mask are as they were."""
    import signal
    cfg = _cfg("float64")
    handler, mask = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with shards.Workers(model.init_params(cfg, seed=2), cfg, 3) as workers:
        for p in workers.procs:
            with open(f"/proc/{p.pid}/status") as f:
                status = dict(line.split(":", 1) for line in f)
            bit = 1 << (signal.SIGINT - 1)
            assert int(status["SigBlk"], 16) & bit and int(status["SigIgn"], 16) & bit, p.pid
    assert signal.getsignal(signal.SIGINT) is handler and signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask


_PARENT = """
import sys, time
from minihead import model, shards
cfg = model.Config(vocab_size=40, n_enc_layers=2, n_dec_layers=2, n_heads=2, d_model=8, d_ff=12, dtype="float64")
params = model.init_params(cfg, seed=2)
print("starting", flush=True)
try:
    with shards.Workers(params, cfg, 3):
        print("ready", flush=True)
        time.sleep(30)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("sig, when", [("SIGKILL", "starting"), ("SIGTERM", "starting"), ("SIGINT", "starting"),
                                       ("SIGKILL", "ready")])
def test_a_parent_killed_or_interrupted_leaves_nothing_behind(sig, when):
    """A process whose two workers are starting (or idle, once ready) is killed (SIGKILL, SIGTERM) or gets
    Ctrl-C (SIGINT to its whole process group, workers included): it ends with the signal's status (130 for
    Ctrl-C, which it catches), its workers notice and end too, quietly (no traceback, no BrokenPipeError or
    KeyboardInterrupt on stderr), and no /dev/shm/minihead-shard-* file is left."""
    import signal
    import subprocess
    import sys
    import time
    files = _shm_files()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-c", _PARENT], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": root})
    try:
        assert proc.stdout.readline() == "starting\n"
        if when == "ready":
            assert proc.stdout.readline() == "ready\n"
        else:
            time.sleep(0.15)                                  # the workers are still importing NumPy
        if sig == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, getattr(signal, sig))
        out, err = proc.communicate(timeout=20)             # stderr closes once the workers have ended too
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (130 if sig == "SIGINT" else -getattr(signal, sig))
    assert err == "", err
    assert _shm_files() <= files
    deadline = time.monotonic() + 5
    group = [p for p in os.listdir("/proc") if p.isdigit() and _pgid(p) == proc.pid]
    while group and time.monotonic() < deadline:
        time.sleep(0.05)
        group = [p for p in group if not _gone(int(p))]
    assert not group, "no process of the run is left"


def _pgid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[2])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None
