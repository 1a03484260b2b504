"""Execute chapters in place, so the committed notebooks carry their outputs and figures.

    python chapters/execute.py --quick                 # every chapter in quick mode
    python chapters/execute.py 03                      # chapter 03 in full mode
    python chapters/execute.py --quick 01 02 04 05 06  # some chapters in quick mode

Each notebook is run top to bottom by nbclient with one BLAS thread (the test suite's setting, so its cached
models are reused), ``MINIHEAD_QUICK`` set or not, and written back with its outputs; its metadata records how:
``metadata["minihead"] = {"mode", "seconds", "blas_threads", "executed"}`` (the README's table of chapters is read
from it). The test suite executes the chapters on temporary copies and never writes these files.
"""
import argparse
import datetime
import os
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def execute(path, quick):
    """Run one notebook in place; returns the wall seconds it took."""
    import nbclient
    import nbformat
    env = {"MINIHEAD_QUICK": "1" if quick else "0",     # no MPLBACKEND: the kernel's inline backend keeps figures
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    os.environ.update(env)                      # the kernel inherits this process's environment
    os.environ.pop("MPLBACKEND", None)
    nb = nbformat.read(path, as_version=4)
    t0 = time.time()
    nbclient.NotebookClient(nb, timeout=3600, kernel_name="python3",
                            resources={"metadata": {"path": str(HERE)}}).execute()
    seconds = time.time() - t0
    nb.metadata["minihead"] = {"mode": "quick" if quick else "full", "seconds": round(seconds),
                               "blas_threads": 1, "executed": datetime.date.today().isoformat()}
    tmp = path.with_suffix(".ipynb.tmp")
    nbformat.write(nb, tmp)
    os.replace(tmp, path)
    return seconds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("chapters", nargs="*", help="chapter numbers (e.g. 01 03); default: all")
    ap.add_argument("--quick", action="store_true", help="quick mode (MINIHEAD_QUICK=1), as the tests run them")
    a = ap.parse_args(argv)
    paths = sorted(HERE.glob("[0-9][0-9]_*.ipynb"))
    if a.chapters:
        unknown = [c for c in a.chapters if not any(p.name.startswith(c + "_") for p in paths)]
        if unknown:
            sys.exit(f"error: no chapter {', '.join(unknown)} in {HERE}")
        paths = [p for p in paths if p.name[:2] in a.chapters]
    for p in paths:
        s = execute(p, a.quick)
        print(f"{p.name}: {'quick' if a.quick else 'full'} mode, {s:.0f} s", flush=True)


if __name__ == "__main__":
    main()
