"""Shared by the chapter generators (chapters/_make_NN.py): collect cells, write an output-free notebook
with fixed cell ids, so regenerating a chapter gives the same file and diffs stay reviewable."""
import pathlib

import nbformat


class Notebook:
    def __init__(self, tag):
        self.tag, self.cells = tag, []

    def md(self, text):
        self.cells.append(nbformat.v4.new_markdown_cell(text.strip("\n")))

    def code(self, text):
        self.cells.append(nbformat.v4.new_code_cell(text.strip("\n")))

    def write(self, filename):
        nb = nbformat.v4.new_notebook()
        for i, cell in enumerate(self.cells):
            cell.id = f"{self.tag}-{i:02d}"
        nb.cells = self.cells
        nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
        nb.metadata["language_info"] = {"name": "python"}
        path = pathlib.Path(__file__).resolve().parent / filename
        nbformat.validate(nb)
        nbformat.write(nb, path)
        print("wrote", path)


SETUP = r'''
import os, sys
sys.path.insert(0, os.path.abspath(".."))   # run from chapters/
QUICK = os.environ.get("MINIHEAD_QUICK", "0") == "1"
'''
