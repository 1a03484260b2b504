"""The chapters: each notebook agrees with its jupytext source, and executes top to bottom in quick mode.

A chapter is written as ``chapters/NN_name.py`` (jupytext percent format: ``# %%`` and ``# %% [markdown]`` cells)
and shipped beside it as ``chapters/NN_name.ipynb``; ``chapters/jupytext.toml`` pairs the two, and
``jupytext --sync chapters/NN_name.py`` brings the notebook up to date after an edit. The sync tests fail when
the two disagree, so neither can be edited alone.

The chapters end with cells that assert the paper's findings as reproduced, so a chapter that executes without
error (MINIHEAD_QUICK=1) is a chapter whose findings held (or whose text says which did not)."""
import os
import pathlib
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
