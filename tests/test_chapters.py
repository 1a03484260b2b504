"""The chapters: each notebook agrees with its jupytext source, and executes top to bottom in quick mode.

A chapter is written as ``chapters/NN_name.py`` (jupytext percent format: ``# %%`` and ``# %% [markdown]`` cells)
and shipped beside it as ``chapters/NN_name.ipynb``; ``chapters/jupytext.toml`` pairs the two, and
``jupytext --sync chapters/NN_name.py`` brings the notebook up to date after an edit. The sync tests fail when
the two disagree, so neither can be edited alone.

The chapters end with cells that assert the paper's findings as reproduced, so a chapter that executes without
error (MINIHEAD_QUICK=1) is a chapter whose findings held (or whose text says which did not)."""
import os
import pathlib
import re
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTER_DIR = ROOT / "chapters"
CHAPTERS = sorted(CHAPTER_DIR.glob("[0-9][0-9]_*.ipynb"))
SOURCES = sorted(CHAPTER_DIR.glob("[0-9][0-9]_*.py"))


def cell_mismatch(source, notebook):
    """The first difference between the cells (type and source) of a jupytext percent source and of its
    notebook, as one line naming both files and the cell; None when every cell agrees."""
    jupytext = pytest.importorskip("jupytext")
    nbformat = pytest.importorskip("nbformat")
    want = [(c.cell_type, c.source) for c in jupytext.read(source, fmt="py:percent").cells]
    got = [(c.cell_type, c.source) for c in nbformat.read(notebook, as_version=4).cells]
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            first = next((k for k, (a, b) in enumerate(zip(w[1].splitlines(), g[1].splitlines())) if a != b), None)
            where = f"line {first + 1}" if first is not None else "length"
            return (f"{notebook.name}: cell {i} ({g[0]}) differs from {source.name} cell {i} ({w[0]}) at {where}; "
                    f"run `jupytext --sync chapters/{source.name}`")
    if len(want) != len(got):
        return (f"{notebook.name} has {len(got)} cells, {source.name} has {len(want)}; "
                f"run `jupytext --sync chapters/{source.name}`")
    return None


# ------------------------------------------------------------------ no measurement typed into prose
# A chapter's words must never contradict the output beside them, so a measurement (what a run or a study gives: a
# BLEU score, a correlation, a p-value, a share over chance, a run time) is printed by a code cell from the loaded
# study or the run, never typed into a markdown cell. The rule, per sentence of a markdown cell (table rows and list
# items are sentences of their own; LaTeX between $...$ is a formula, not a measurement):
#   - a number (or a range of numbers) with the unit of a measurement: BLEU, min / minutes / hours / seconds;
#   - BLEU, rho or p followed by a decimal number ("BLEU 43.5", "rho = 0.80", "p = 0.03");
#   - a number followed by "x chance".
# A sentence that labels its numbers as the paper's (it names the paper, Voita et al., WMT or OpenSubtitles) is
# allowed: those numbers are transcribed from the paper once and do not change with a study.
MEASURED_UNITS = r"(?:BLEU|min|mins|minutes|hours?|seconds)\b"
_NUM = r"\d+(?:[.,]\d+)*"
MEASUREMENT = re.compile(rf"(?<![\w.]){_NUM}(?:\s*(?:-|to)\s*{_NUM})?\s*{MEASURED_UNITS}"
                         rf"|\b(?:BLEU|rho|p)\s*(?:=|<|>|of|is)?\s*-?\d+\.\d+"
                         rf"|(?<![\w.]){_NUM}(?:\.\d+)?\s*x chance")
PAPERS_OWN = re.compile(r"\bpaper\b|Voita|WMT|OpenSubtitles", re.I)


def typed_measurements(markdown):
    """The measurements typed into one markdown cell (see the rule above): [(the match, its sentence)]."""
    text = re.sub(r"\$[^$]*\$", " ", markdown)                          # formulas
    text = re.sub(r"\n(?![ \t]*(?:[|#>]|[-*] |\d+\. ))", " ", text)       # join the lines of a paragraph
    out = []
    for sentence in re.split(r"(?<=[.!?;])\s+|\n", text):
        if not PAPERS_OWN.search(sentence):
            out += [(m.group(0), sentence.strip()) for m in MEASUREMENT.finditer(sentence)]
    return out


def test_the_typed_measurement_rule_on_worked_examples():
    """typed_measurements flags a measured number in prose and passes the same number labelled as the paper's,
    a setting, a section number or a formula."""
    assert [m for m, _ in typed_measurements("The model reaches test BLEU 43.5 after training.")] == ["BLEU 43.5"]
    assert [m for m, _ in typed_measurements("A cold run takes about 17 min on one core.")] == ["17 min"]
    assert [m for m, _ in typed_measurements("Relevance and ablation agree (rho = 0.80).")] == ["rho = 0.80"]
    assert [m for m, _ in typed_measurements("| 05 | the sweep | ~2-3 min |")] == ["2-3 min"]
    assert [m for m, _ in typed_measurements("The head points there 2.4 x chance.")] == ["2.4 x chance"]
    assert typed_measurements("The paper keeps 10 of 48 heads for -0.15 BLEU on WMT.") == []
    assert typed_measurements("Gates train at lr 0.2 for at most 600 steps; see section 2.4.") == []
    assert typed_measurements("The criterion is $p < 0.05$ pooled over seeds.") == []
    # a sentence wrapped over two lines is one sentence: the paper's label on the first line covers the second
    assert typed_measurements("The paper's Table 2 gap (0.01\nto 0.51 BLEU) is small.") == []


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_chapter_prose_types_no_measurement(source):
    """No markdown cell of a chapter states a measurement by hand (the rule above): every number a reader is
    shown about a run or a study is printed by a code cell from it, so a new study never leaves a chapter
    contradicting itself."""
    jupytext = pytest.importorskip("jupytext")
    cells = jupytext.read(source, fmt="py:percent").cells
    found = [f"cell {i}: {m!r} in {s[:100]!r}" for i, c in enumerate(cells) if c.cell_type == "markdown"
             for m, s in typed_measurements(c.source)]
    assert not found, f"{source.name} types measurements into its prose:\n" + "\n".join(found)


def test_every_chapter_is_a_pair():
    """Every chapter notebook NN_name.ipynb has its jupytext source NN_name.py and every source its notebook,
    and the jupytext configuration that pairs them (formats ipynb,py:percent) is in chapters/."""
    assert CHAPTERS, "no chapter notebooks found"
    assert [p.stem for p in CHAPTERS] == [p.stem for p in SOURCES]
    assert 'formats = "ipynb,py:percent"' in (CHAPTER_DIR / "jupytext.toml").read_text()
    assert not list(CHAPTER_DIR.glob("_make_*.py")), "chapter generators are gone: edit chapters/NN_name.py"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_notebook_cells_equal_jupytext_source(path):
    """The notebook's cells, in order, have the types and sources of the cells of its percent-format source
    (outputs, execution counts and metadata are not compared): the .ipynb a reader opens is the .py that is
    reviewed and linted."""
    mismatch = cell_mismatch(path.with_suffix(".py"), path)
    assert mismatch is None, mismatch


def test_sync_check_catches_a_hand_edited_notebook(tmp_path):
    """cell_mismatch, on a temporary copy of a committed pair, reports a notebook whose markdown was edited
    by hand and one that lost its last cell, naming the cell; the committed files are not touched."""
    nbformat = pytest.importorskip("nbformat")
    source, notebook = shutil.copy(SOURCES[-1], tmp_path), shutil.copy(CHAPTERS[-1], tmp_path)
    source, notebook = pathlib.Path(source), pathlib.Path(notebook)
    assert cell_mismatch(source, notebook) is None
    nb = nbformat.read(notebook, as_version=4)
    nb.cells[0].source += "\nA sentence added in Jupyter but not to the source."
    nbformat.write(nb, notebook)
    assert "cell 0 (markdown)" in cell_mismatch(source, notebook)
    nb.cells[0].source = nb.cells[0].source.rsplit("\n", 1)[0]
    n = len(nb.cells)
    nb.cells = nb.cells[:-1]
    nbformat.write(nb, notebook)
    assert f"has {n - 1} cells" in cell_mismatch(source, notebook)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_executes_in_quick_mode(path, monkeypatch, tmp_path):
    """The chapter runs top to bottom with MINIHEAD_QUICK=1 and every one of its asserting cells passes.
    It runs on a temporary copy of chapters/ (notebooks only), so the committed notebooks are never written."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("MINIHEAD_QUICK", "1")
    # One BLAS thread in the kernel: float32 GEMM sums depend on how the work is split between threads; with
    # the split pinned, the chapters reuse the models the study over seeds trained (run folders name the count).
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # Chapter 7 looks for real data beside the repository when MINIHEAD_REALDATA is unset; the copy keeps that.
    monkeypatch.setenv("MINIHEAD_REALDATA", os.environ.get("MINIHEAD_REALDATA", str(ROOT.parent / "shared" / "realdata")))
    copy = tmp_path / "chapters"
    copy.mkdir()
    for nb_path in CHAPTERS:                # chapter 0 lists the notebooks beside it
        shutil.copy(nb_path, copy)
    nb = nbformat.read(copy / path.name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(copy)}})
    client.execute()


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_ships_executed(path):
    """The committed notebook carries its outputs (a reader sees the results on the repository page without
    running anything): some code cell has outputs, and no cell's output is an error; its metadata says how it
    was produced (``python chapters/execute.py``: mode, seconds, BLAS threads, date), which the README quotes."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert any(c.outputs for c in code), f"{path.name}: no outputs; run python chapters/execute.py for it"
    errors = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and any(o.output_type == "error" for o in c.outputs)]
    assert not errors, f"{path.name}: cells {errors} end in an error"
    meta = nb.metadata.get("minihead", {})
    assert meta.get("mode") in ("quick", "full") and meta.get("seconds", -1) >= 0 and meta.get("executed"), \
        f"{path.name}: metadata.minihead (mode, seconds, executed) missing; run python chapters/execute.py for it"
