"""``python -m minihead ...``: the command line of :mod:`minihead.cli` (every sub-command, its checks and its
one-line errors are there). The array backend is chosen when the package's modules are imported
(``MINIHEAD_BACKEND``), so a bad choice is caught here and printed as one line too, exit status 2."""
import sys

from .errors import MiniheadError

try:
    from .cli import build_parser, main  # noqa: F401  (build_parser: for callers that list the commands)
except MiniheadError as exc:   # the backend's import-time error: MINIHEAD_BACKEND names no usable backend
    print(f"error: {exc}", file=sys.stderr)
    raise SystemExit(2) from None
except KeyboardInterrupt:      # Ctrl-C while NumPy and the package load: nothing has started, no traceback
    print("interrupted before the command started: nothing was done", file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    main()
