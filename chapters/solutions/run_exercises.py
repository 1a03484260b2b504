"""The one runner of the solution files: ``python chapters/solutions/NN_solutions.py [exercise_K ...]`` runs the
exercises named (all of the file's ``exercise_K`` functions when none is), each after a header line."""


def main(namespace, names):
    """Call ``namespace[name]()`` for each name in ``names``, or for every ``exercise_*`` of ``namespace``."""
    for name in names or sorted(n for n in namespace if n.startswith("exercise_")):
        print(f"--- {name}")
        namespace[name]()
