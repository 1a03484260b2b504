"""The command line: user errors are one clear line naming the file and problem, exit status 2."""
import os
import pathlib
import subprocess
import sys

import pytest

from minihead import checkpoint
from minihead.__main__ import main

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_cli(*args, env=None):
    e = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "minihead", *args], capture_output=True, text=True, env=e, cwd=ROOT)


def test_missing_checkpoint_is_one_line(tmp_path):
    r = run_cli("translate", str(tmp_path / "nope.npz"))
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: {tmp_path / 'nope.npz'}: no such checkpoint file"


def test_unknown_backend_is_one_line():
    r = run_cli("translate", "x.npz", env={"MINIHEAD_BACKEND": "tpu"})
    assert r.returncode != 0 and "unknown backend 'tpu'" in r.stderr


def test_misaligned_parallel_files_name_both(tmp_path, capsys):
    (tmp_path / "train.src").write_text("a b\nc d\n")
    (tmp_path / "train.tgt").write_text("x\n")
    (tmp_path / "dev.src").write_text("a\n")
    (tmp_path / "dev.tgt").write_text("x\n")
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", str(tmp_path), "--out", str(tmp_path / "run"), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "train.src" in err and "train.tgt" in err


def test_train_translate_evaluate_end_to_end(tmp_path, capsys):
    """A tiny training run through the CLI, then translate and evaluate its checkpoint."""
    data = tmp_path / "data"
    data.mkdir()
    pairs = [(f"w{i % 7} w{(i * 3) % 7} .", f"W{(i * 3) % 7} W{i % 7} .") for i in range(200)]
    for split, sl in (("train", pairs[:180]), ("dev", pairs[180:190]), ("test", pairs[190:])):
        (data / f"{split}.src").write_text("".join(s + "\n" for s, _ in sl))
        (data / f"{split}.tgt").write_text("".join(t + "\n" for _, t in sl))
    out = tmp_path / "run"
    main(["train", "--data", str(data), "--out", str(out), "--no-progress", "--set", "max_steps=6",
          "eval_every=3", "n_enc_layers=1", "n_dec_layers=1", "d_model=16", "d_ff=16", "max_tokens=400"])
    ck = checkpoint.load(str(out / "best.npz"))
    assert ck.cfg.n_enc_layers == 1 and ck.meta["step"] in (3, 6)
    hyp_file = tmp_path / "hyp.txt"
    main(["translate", str(out / "best.npz"), "--data", str(data), "--output", str(hyp_file)])
    assert len(hyp_file.read_text().splitlines()) == 10
    s = main(["evaluate", str(out / "best.npz"), "--data", str(data), "--beam", "2"])
    assert 0.0 <= s["bleu"] <= 100.0 and "tok:13a" in s["bleu_signature"]
    assert "BLEU" in capsys.readouterr().out
