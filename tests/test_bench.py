"""The benchmark's own arithmetic: FLOP counting from the shapes, interleaved rounds, the relevance-pass
ratio, the profile and a one-round run (no PyTorch or autograd, so it stays quick)."""
import json
import pathlib
from types import SimpleNamespace

import numpy as np
import pytest

from minihead import bench, model


def test_step_flops_counts_every_product_three_times():
    """A step is 3x the forward's matrix products (dX and dW match Y in size): per encoder layer four d x d
    projections and the FFN on B S rows plus Q K^T and A V; per decoder layer self-attention on B T rows,
    cross-attention (Q, O on B T rows, K, V on B S rows, products over T x S), the FFN; the output layer."""
    cfg = model.Config(vocab_size=11, n_enc_layers=1, n_dec_layers=1, n_heads=2, d_model=4, d_ff=6)
    b = SimpleNamespace(src=np.zeros((2, 3), int), tgt_in=np.zeros((2, 5), int))
    B, S, T, d, f, V = 2, 3, 5, 4, 6, 11
    enc = 2 * (4 * B * S * d * d + 2 * B * S * d * f) + 2 * 2 * B * S * S * d
    dec = (2 * (4 * B * T * d * d) + 2 * 2 * B * T * T * d                       # self-attention
           + 2 * (2 * B * T * d * d + 2 * B * S * d * d) + 2 * 2 * B * T * S * d  # cross-attention
           + 2 * 2 * B * T * d * f)                                               # FFN
    assert bench.step_flops(cfg, b) == 3 * (enc + dec + 2 * B * T * d * V)
    run, flops = bench.gemm_fn(cfg, b)
    assert flops == 3 * sum(2 * n * k * m for n, k, m in bench.linear_shapes(cfg, b))
    assert np.isfinite(run())


def test_interleaved_rounds_rotate_the_order():
    """Each contender runs once per round; the starting contender moves by one each round."""
    order = []
    times = bench.interleaved({n: (lambda n=n: order.append(n)) for n in "abc"}, rounds=4)
    assert order == list("abc" "bca" "cab" "abc")
    assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4, "c": 4}
    assert bench.spread([3, 1, 2, 10]) == (2.5, 1, 10)


def test_bench_relevance_ratio():
    """bench_relevance returns t(relevance pass) / t(forward + backward), the median over alternating repeats."""
    cfg = model.Config(vocab_size=30, n_enc_layers=1, n_dec_layers=1, n_heads=2, d_model=8, d_ff=12, dropout=0.0)
    params = model.init_params(cfg, 0)
    batches = bench.synthetic_batches(30, n_batches=2, B=3, S=6, T=5)
    ratio = bench.bench_relevance(params, cfg, batches, repeats=3)
    assert isinstance(ratio, float) and 0 < ratio < 100


def test_one_round_run_and_profile():
    """run() measures the hand-written step, whole and in two shards, against the GEMM rate and reports the
    achieved GFLOP/s of both and the ratio of their speeds; --profile names the layer functions."""
    lines = []
    r = bench.run("quick", vocab_size=60, rounds=1, with_torch=False, with_autograd=False,
                  with_relevance=False, with_memory=False, n_shards=2, log=lines.append)
    assert r["throughput"]["minihead"]["median"] > 0 and r["throughput"][bench.SHARDED]["median"] > 0
    for key in ("share", "sharded_share"):
        med, lo, hi = r["gflops"][key]
        assert 0 < lo <= med <= hi
    assert r["ratio"][bench.SHARDED]["median"] > 0 and r["shards"] == 2
    assert any("GEMM at the model's linear shapes" in line for line in lines)
    out = []
    bench.profile("quick", vocab_size=60, steps=1, log=out.append)
    assert "linear_backward" in "\n".join(out)


def test_gpu_doc_table_is_rendered_from_the_shipped_record():
    """docs/gpu.md's benchmark table (between its gpu-bench markers) is exactly bench.gpu_table of
    docs/bench/h200.json, so no GPU figure in the docs is typed by hand; regenerate it with
    ``python -m minihead.bench --gpu-doc``."""
    import json
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "gpu.md").read_text()
    table = re.search(r"<!-- gpu-bench:begin -->\n(.*)\n<!-- gpu-bench:end -->", doc, re.S).group(1)
    assert table == bench.gpu_table(json.loads((root / "docs" / "bench" / "h200.json").read_text())), \
        "docs/gpu.md is stale: python -m minihead.bench --gpu-doc"


@pytest.mark.parametrize("argv, needle", [
    (["--config", "nope"], "--config 'nope'"), (["--vocab", "0"], "--vocab 0"), (["--rounds", "0"], "--rounds 0"),
    (["--json", "/nonexistent-folder/x.json"], "--json"), (["--backend", "tpu"], "invalid choice"),
])
def test_bench_refuses_bad_arguments_before_any_work(argv, needle, capsys):
    """A bad configuration, vocabulary size, round count, backend or --json path is one line on stderr and exit
    status 2 before anything is timed (a bad --json path was found only after the whole benchmark)."""
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and needle in err and "Traceback" not in err


def test_heads_run_times_each_head_count_against_the_first():
    """bench.heads_run: one contender per head count (d_model kept), each timed over the same batches; the first
    count's ratio to itself is exactly 1, the others' positive; a count that does not divide d_model is refused."""
    r = bench.heads_run("quick", (1, 2), vocab_size=60, rounds=1, log=lambda *a: None)
    assert r["counts"] == [1, 2] and set(r["throughput"]) == {1, 2}
    assert r["ratio"][1]["median"] == 1.0 and r["ratio"][2]["median"] > 0
    with pytest.raises(ValueError, match="divide d_model"):
        bench.heads_run("quick", (3,), vocab_size=60, rounds=1, log=lambda *a: None)


def test_heads_table_in_the_docs_is_the_shipped_record():
    """docs/benchmark.md's table of heads a layer is exactly bench.heads_table of docs/bench/heads-cpu.json (made
    by ``python -m minihead.bench --config default --heads 2,4,8 --rounds 5 --json docs/bench/heads-cpu.json``)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    record = json.loads((root / "docs" / "bench" / "heads-cpu.json").read_text())
    assert bench.heads_table(record) in (root / "docs" / "benchmark.md").read_text()
