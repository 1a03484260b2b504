"""The shared plotting helpers render on small inputs with the Agg backend, and the figures make their point:
each quantity on its fixed colour range (minihead.figures), integer ticks for heads and layers, legends where
lines or bars are compared, no title or label printed over another (renderer bounding boxes), and cell numbers
readable near zero. The reproduce report carries the head-functions (Figure 8's kind) and all-attention pruning
(Figure 9's kind) figures, each captioned with the paper's number beside this model's, on synthetic stages."""
import json
import pathlib
from types import SimpleNamespace

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from minihead import analysis, figures, findings, importance, paper, roles, stages  # noqa: E402
from minihead import report as reports  # noqa: E402  (report: this file's fixture of a roles report)
from minihead.model import Config  # noqa: E402

L, H = 2, 3


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def report(rare=True):
    """A synthetic RolesReport of 2 layers x 3 heads, one sentence of four words."""
    rng = np.random.default_rng(0)
    maps = rng.random((L, H, 4, 4))
    maps /= maps.sum(-1, keepdims=True)
    acc = {("nsubj", "dep->head"): np.array([[0.2, 0.6, 0.1], [0.3, 0.31, 0.0]])}
    rare_shares = roles.RareShares(rarest=np.array([[0.05, 0.7, 0.1], [0.2, 0.0, 0.01]]),
                                   two_rarest=np.full((L, H), 0.5), chance_rarest=0.2, chance_two=0.4,
                                   n_sentences=1, top_n=5) if rare else None
    role_sets = {(l, h): set() for l in range(L) for h in range(H)}
    role_sets[(0, 0)] |= {"positional"}
    role_sets[(0, 1)] |= {"syntactic", "rare"}
    return analysis.RolesReport(
        n_layers=L, n_heads=H, words=[["the", "cat", "sat", "down"]], maps=[maps],
        confidence=np.array([[0.95, 0.02, 0.5], [0.3, 0.0, 0.99]]),
        shares=np.full((L, H, 2), 0.3), shares_possible=np.array([[[0.95, 0.01]] * H, [[0.2, 0.3]] * H]),
        positional={(0, 0): -1}, acc=acc, counts={k: 10 for k in acc}, baseline={k: 0.3 for k in acc},
        offsets={k: -1 for k in acc}, syntactic={k: [(0, 1)] for k in acc},
        table=[roles.Table1Row("nsubj", "dep->head", (0, 1), 0.6, 0.3, 10)], rare=rare_shares, roles=role_sets,
        n_words=4, n_unknown=0)


def enc_runs():
    """Two encoder-sweep runs on 2 x 3 heads: one keeps four heads, one keeps two."""
    masks = ([[True, True, False], [True, False, True]], [[True, True, False], [False, False, False]])
    return [{"lam": lam, "n_retained": {"enc": int(np.sum(m))}, "retained": {"enc": m}, "bleu": b, "steps": 20}
            for lam, m, b in zip((0.01, 0.1), masks, (30.0, 28.5))]


def all_runs():
    """Two all-attention runs on 2 layers x 3 heads per type."""
    def run(lam, masks, bleu):
        n = {k: int(np.sum(m)) for k, m in masks.items()}
        return {"lam": lam, "retained": masks, "n_retained": n, "bleu": bleu,
                "history": [{"step": 5, "open": n}]}
    return [run(0.03, {"enc": [[1, 1, 0], [1, 0, 0]], "dec_self": [[1, 1, 1], [0, 1, 0]],
                       "dec_enc": [[1, 0, 1], [1, 1, 1]]}, 29.0),
            run(0.1, {"enc": [[1, 0, 0], [0, 0, 0]], "dec_self": [[1, 1, 0], [0, 0, 0]],
                      "dec_enc": [[0, 0, 1], [1, 1, 0]]}, 27.5)]


def trace_doc():
    """A trace document of two seeds at three steps (the shape of study.trace_doc)."""
    rows = [{"step": s, "positional": {"share": 0.3 * i, "confidence": 0.4 + 0.1 * i},
             "syntactic": {"relations_held": ["nsubj"] * i}} for i, s in enumerate((100, 200, 300))]
    return {"data": "data_small", "study": "quick", "traces": {"1": rows, "2": rows}}


def text_boxes(fig):
    """Window extents of every visible title, suptitle and axis label of ``fig`` (those that print text)."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
    return [(t.get_text(), t.get_window_extent(r)) for t in texts if t.get_visible() and t.get_text()]


def assert_no_overlap(fig):
    """No two titles or axis labels of ``fig`` overlap on the canvas, and none lies over another axes (a colour
    bar included)."""
    boxes = text_boxes(fig)
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            assert not ba.overlaps(bb), f"{a!r} overprints {b!r}"
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        frame = ax.get_window_extent(r)
        others = [fig._suptitle] if fig._suptitle is not None else []
        for other in fig.axes:
            if other is not ax:
                others += [other.title, other.yaxis.label, other.xaxis.label]
        for t in others:
            if t.get_visible() and t.get_text():
                assert not t.get_window_extent(r).overlaps(frame), f"{t.get_text()!r} lies over another panel"


def integer_labels(labels):
    """True when there are tick labels and every one is a whole number."""
    texts = [t.get_text() for t in labels]
    return bool(texts) and all(t.lstrip("-").isdigit() for t in texts)


def image_axes(fig):
    return [a for a in fig.axes if a.images and a.get_label() != "<colorbar>"]


def test_plot_importance_fixed_ranges_integer_ticks_no_overprint():
    """plot_importance: relevance and confidence panels on the shared 0..1 ranges (not the data's maximum),
    integer tick labels for heads (rank) and layers, "layer" and x labels present, and the figure title, panel
    titles, labels and colour bars do not overprint one another."""
    rel = np.array([[0.42, 0.58, 0.0], [0.1, 0.3, 0.6]])
    conf = np.array([[0.3, 0.9, 0.4], [0.8, 0.2, 0.1]])
    fig = importance.plot_importance(rel, conf, title="encoder head relevance (LRP) and confidence")
    ax_rel, ax_conf = image_axes(fig)
    assert ax_rel.images[0].get_clim() == figures.RELEVANCE_RANGE
    assert ax_conf.images[0].get_clim() == figures.CONFIDENCE_RANGE
    for ax in (ax_rel, ax_conf):
        assert ax.get_ylabel() == "layer" and ax.get_xlabel().startswith("heads")
        assert integer_labels(ax.get_xticklabels()) and integer_labels(ax.get_yticklabels())
        assert len(ax.get_xticks()) == H and len(ax.get_yticks()) == L
    assert_no_overlap(fig)


def test_plot_relevance_bars_has_legend_integer_layers_and_fixed_scale():
    """plot_relevance_bars: one legend entry per head, integer layer ticks, the relevance scale 0..1."""
    ax = importance.plot_relevance_bars(np.array([[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]]), title="relevance")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["head 0", "head 1", "head 2"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1"]
    assert ax.get_ylim() == figures.RELEVANCE_RANGE and ax.get_xlabel() == "layer"
    assert_no_overlap(ax.figure)


def test_plot_head_scores_quantity_range_and_readable_text_near_zero():
    """plot_head_scores: quantity="relevance" draws on the shared range and colour map; every cell's text is
    black or white by the cell colour's luminance, so a near-zero cell of a diverging map (white) has black text,
    not white on white; heads and layers have integer ticks."""
    ax = roles.plot_head_scores(np.array([[0.0, 0.5], [1.0, 0.2]]), "relevance", quantity="relevance")
    assert ax.images[0].get_clim() == figures.RELEVANCE_RANGE
    assert ax.images[0].get_cmap().name == figures.CMAPS["relevance"]
    assert integer_labels(ax.get_xticklabels()) and integer_labels(ax.get_yticklabels())
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("head", "layer")
    _, axes = figures.new_figure()
    ax = roles.plot_head_scores(np.array([[-1.0, 0.0, 1.0, 40.0]]), ax=axes[0, 0], fmt="{:.0f}",
                                quantity="margin_points")
    assert ax.images[0].get_clim() == figures.MARGIN_POINTS_RANGE
    colours = [t.get_color() for t in ax.texts]
    assert colours[:3] == ["black"] * 3, "near-zero cells of RdBu_r are near white: black text"
    assert colours[3] == "white", "the dark red end gets white text"
    assert figures.text_colour((1.0, 1.0, 1.0)) == "black" and figures.text_colour((0.0, 0.0, 0.3)) == "white"


def test_plot_attention_on_the_fixed_attention_range():
    """plot_attention: colour range 0..1 whatever the map's maximum, axis labels for queries and keys."""
    ax = roles.plot_attention(np.full((3, 3), 0.2), ["a", "b", "c"])
    assert ax.images[0].get_clim() == figures.ATTENTION_RANGE
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("attended (key)", "query")


@pytest.mark.parametrize("rare", [True, False])
def test_plot_scores_fixed_ranges_and_no_colliding_titles(rare):
    """plot_scores: four panels, confidence and shares on 0..1 and the syntactic margin on -40..40 points (the
    shared constants), integer head/layer ticks, and the (long) panel titles do not collide."""
    fig = analysis.plot_scores(report(rare))
    panels = image_axes(fig)
    assert len(panels) == (4 if rare else 3)
    want = [figures.CONFIDENCE_RANGE, figures.SHARE_RANGE, figures.MARGIN_POINTS_RANGE, figures.SHARE_RANGE]
    assert [ax.images[0].get_clim() for ax in panels] == want[:len(panels)]
    for ax in panels:
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("head", "layer")
        assert integer_labels(ax.get_xticklabels()) and integer_labels(ax.get_yticklabels())
    assert_no_overlap(fig)


def test_plot_sentence_and_save_figures(tmp_path):
    """plot_sentence: one map per head on the attention range, titles naming layer, head and roles without
    overlapping; save_figures writes both PNGs."""
    fig = analysis.plot_sentence(report())
    assert len(image_axes(fig)) == L * H
    assert all(ax.images[0].get_clim() == figures.ATTENTION_RANGE for ax in image_axes(fig))
    assert fig.axes[1].get_title().startswith("L0 H1: rare, syntactic")
    assert_no_overlap(fig)
    paths = analysis.save_figures(report(), str(tmp_path))
    assert [pathlib.Path(p).name for p in paths] == ["head_scores.png", "heads_sentence0.png"]
    assert all(pathlib.Path(p).stat().st_size > 0 for p in paths)


def test_plot_trace_has_one_legend_for_every_line_and_the_criteria():
    """plot_trace: a legend names each document and seed (two documents x two seeds) and the criterion lines;
    the panels label their axes (integer ticks for the relation count) and titles do not overlap."""
    fig = reports.plot_trace([trace_doc(), trace_doc()], labels=["needs", "control"])
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[:4] == ["needs, seed 1", "needs, seed 2", "control, seed 1", "control, seed 2"]
    assert any(t.startswith("criterion") for t in labels)
    assert [ax.get_xlabel() for ax in fig.axes] == ["training step"] * 3
    assert [t.get_text() for t in fig.axes[2].get_yticklabels()] == ["0", "1", "2", "3", "4"]
    assert_no_overlap(fig)
    _, axes = plt.subplots(1, 3)
    fig = reports.plot_trace([trace_doc()], axes=axes)     # a caller's axes: the legend in the last panel
    assert fig.axes[2].get_legend() is not None


def test_report_figures_name_roles_survivors_and_attention_types():
    """The report's figures: Figure 8's kind colours each encoder head by role in a layer x head grid per run
    (integer ticks, a legend of roles and "pruned"); Figure 9's kind compares the three attention types per run
    (a legend of the types, integer ticks); Figure 7's kind has its legend; none overprints its titles."""
    rep = report()
    fig = reports.plot_head_functions(rep.roles, enc_runs(), L, H)
    grids = image_axes(fig)
    assert len(grids) == 3 and grids[0].get_title() == "every head" and grids[2].get_title().startswith("lambda 0.1: 2 of 6")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["positional (P)", "syntactic (S)",
                                                                   "rare-word (R)", "no role", "pruned"]
    for ax in grids:
        assert integer_labels(ax.get_xticklabels()) and integer_labels(ax.get_yticklabels())
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("head", "layer")
    assert sorted(t.get_text() for t in grids[0].texts) == ["P", "SR"]
    pruned = grids[2].images[0].get_array()[1, 2]          # pruned in the second run: white
    assert np.allclose(pruned, 1.0)
    assert_no_overlap(fig)
    cfg = Config(n_enc_layers=L, n_dec_layers=L, n_heads=H)
    fig = reports.plot_all_pruning(all_runs(), cfg)
    totals = fig.axes[0]
    legend = [t.get_text() for t in totals.get_legend().get_texts()]
    assert [figures.KIND_NAMES[k] for k in ("enc", "dec_self", "dec_enc")] == [t for t in legend if "attention" in t]
    assert "all 6 heads of a type" in legend
    assert [int(p.get_height()) for p in totals.patches[:2]] == [3, 1], "encoder heads kept per run"
    for ax in fig.axes[1:]:
        assert ax.get_xlabel() == "layer" and [t.get_text() for t in ax.get_xticklabels()] == ["0", "1"]
        assert ax.get_legend() is not None
    assert_no_overlap(fig)
    fig = reports.plot_encoder_pruning(enc_runs(), 30.2, L * H)
    assert len(fig.axes[0].get_legend().get_texts()) == 2
    assert_no_overlap(fig)


def test_report_carries_figures_8_and_9_beside_the_paper(tmp_path):
    """write_report on synthetic stages (no training): README.md links head_functions.png and prune_all.png,
    every figure written; each new caption names the paper's figure with the paper's numbers from
    minihead.paper beside this model's (role counts, survivors per run, heads kept per attention type)."""
    cfg = Config(n_enc_layers=L, n_dec_layers=L, n_heads=H)
    rng = np.random.default_rng(1)
    share = rng.random((L, H))
    share /= share.sum(-1, keepdims=True)
    imp = {k: {"enc": v.tolist()} for k, v in (("relevance", share), ("relevance_abs", share),
                                                 ("confidence", rng.random((L, H))), ("michel", rng.random((L, H))),
                                                 ("ablation", rng.random((L, H))))}
    study = SimpleNamespace(cfg=cfg, name="synthetic", corpus=SimpleNamespace(train_src=["a"] * 5))
    allk = all_runs()
    summ, rep, enc, scratch = stages.importance_summary(imp), report(), enc_runs(), [{"bleu": 28.0}]
    verdicts = findings.study_verdicts(summ, rep, enc, allk, scratch, cfg, imp=imp)
    path = reports.write_report(str(tmp_path), study, {"study": "quick", "n_test": 10}, imp, summ, rep,
                                {"bleu": 30.2}, enc, allk, scratch, {"train": 1.0}, verdicts)
    text = pathlib.Path(path).read_text()
    for name in ("relevance.png", "prune_encoder.png", "head_functions.png", "prune_all.png"):
        assert f"]({name})" in text and (tmp_path / name).stat().st_size > 0, name
    caption8 = next(line for line in text.splitlines() if line.startswith("*Head functions"))
    ps = paper.SURVIVOR_ROLES_AT_48
    assert "Figure 8" in caption8 and f"{ps['positional']} positional, {ps['syntactic']} syntactic" in caption8
    assert "of 6 encoder heads 1 positional, 1 syntactic, 1 rare-word, 4 with no role" in caption8
    assert "4 (lambda 0.01: 1 / 1 / 1); 2 (lambda 0.1: 1 / 1 / 1)" in caption8
    caption9 = next(line for line in text.splitlines() if line.startswith("*All attention types pruned"))
    (a, b, c), _, _ = paper.TABLE2["WMT"][0]
    assert "Figure 9" in caption9 and f"{a} / {b} / {c}" in caption9
    assert "3 / 4 / 5 (lambda 0.03); 1 / 2 / 3 (lambda 0.1)" in caption9
    caption7 = next(line for line in text.splitlines() if line.startswith("*Encoder-head pruning"))
    assert "Figure 7" in caption7 and reports.PAPER_SAYS["prunable"] in caption7
    assert json.loads((tmp_path / "results.json").read_text())["findings"].keys() == findings.FINDINGS.keys()


@pytest.mark.parametrize("n_seeds", [1, 3])
def test_plot_need_matrix_keeps_its_title_on_the_canvas(n_seeds):
    """plot_need_matrix of the shipped head x need study, with all its seeds or one (a narrow figure): the title
    lies inside the figure (wrapped when the figure is narrow), a panel per seed, and no title or label
    overprints another."""
    from minihead import study
    doc = study.load_needs()
    doc = {**doc, "per_seed": doc["per_seed"][:n_seeds]}
    fig = reports.plot_need_matrix(doc)
    assert [a.get_title() for a in image_axes(fig)] == [f"seed {p['seed']}" for p in doc["per_seed"]]
    fig.canvas.draw()
    box, canvas = fig._suptitle.get_window_extent(fig.canvas.get_renderer()), fig.bbox
    assert canvas.x0 <= box.x0 and box.x1 <= canvas.x1 and box.y1 <= canvas.y1, "the title runs off the figure"
    assert_no_overlap(fig)


@pytest.mark.parametrize("name", ["default", "heads8x32"])
def test_plot_need_grid_draws_a_layers_by_heads_panel_per_seed_and_need(name):
    """plot_need_grid of each shipped head x need study (2 and 8 heads a layer): a panel per seed and column (the
    needs, then BLEU), each an image of layers x heads on the shared drop-in-points range with integer head and
    layer ticks, each cell the drop of that head's single ablation; the seed named on its row; no title or label
    overprints another."""
    from minihead import study
    doc = study.load_needs(name)
    fig = reports.plot_need_grid(doc)
    panels = image_axes(fig)
    m = doc["per_seed"][0]["matrix"]
    cols, L, H = [*m["needs"], "bleu"], len(m["single"]), len(m["single"][0])
    assert len(panels) == len(doc["per_seed"]) * len(cols)
    for i, p in enumerate(doc["per_seed"]):
        row = panels[i * len(cols):(i + 1) * len(cols)]
        assert row[0].get_ylabel().startswith(f"seed {p['seed']}")
        for ax, need in zip(row, cols):
            im = ax.images[0]
            assert im.get_clim() == figures.colour_range("drop_points") and im.get_array().shape == (L, H)
            assert [t.get_text() for t in ax.get_xticklabels()] == [str(h) for h in range(H)]
            assert [t.get_text() for t in ax.get_yticklabels()] == [str(l) for l in range(L)]
            cell = p["matrix"]["single"][L - 1][H - 1][need]
            want = cell if need == "bleu" else 100 * cell
            assert float(im.get_array()[L - 1, H - 1]) == pytest.approx(want)
    fig.canvas.draw()
    assert_no_overlap(fig)


def test_plot_pilot_survivors_codes_each_head_by_mask_and_carrier():
    """plot_pilot_survivors of the shipped pruning pilot: one layers x heads panel per pruned run, integer head
    and layer ticks, each cell coded 0 pruned / 1 kept / 2 need carrier kept / 3 need carrier pruned from the run's
    mask and the carriers of that seed's matrix (report.pilot_runs); a legend entry for each code; the run named in
    its title; no title or label overprints another."""
    rows, _ = reports.pilot_runs()
    fig = reports.plot_pilot_survivors()
    panels = image_axes(fig)
    assert len(panels) == len(rows)
    for ax, x in zip(panels, rows):
        mask, carriers = x["run"]["retained"]["enc"], set(x["kept"]["carriers"]) if x["kept"] else set()
        L, H = len(mask), len(mask[0])
        codes = ax.images[0].get_array()
        assert codes.shape == (L, H)
        for l in range(L):
            for h in range(H):
                carrier = f"L{l}H{h}" in carriers
                assert int(codes[l, h]) == ((2 if carrier else 1) if mask[l][h] else (3 if carrier else 0))
        assert [t.get_text() for t in ax.get_xticklabels()] == [str(h) for h in range(H)]
        assert [t.get_text() for t in ax.get_yticklabels()] == [str(l) for l in range(L)]
        assert ax.get_title().replace("\n", " ").startswith(f"seed {x['seed']}, lambda {x['run']['lam']:g}:")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["pruned", "kept", "need carrier, kept",
                                                                  "need carrier, pruned"]
    fig.canvas.draw()
    assert_no_overlap(fig)
