"""What every figure of the project shares: the colour range of each quantity, its colour map, and small drawing
helpers (a new figure with constrained layout, integer ticks, cell text readable on any cell colour).

One quantity is drawn on one fixed scale in every chapter and in the report, so that two figures can be compared
by eye: a relevance share of 0.4 is the same red in chapter 2, chapter 3 and ``report/relevance.png``. The
helpers of :mod:`minihead.importance`, :mod:`minihead.roles`, :mod:`minihead.analysis`,
:mod:`minihead.emergence` and :mod:`minihead.reproduce` take their ranges from :data:`RANGES`.

matplotlib is imported inside the functions, so the package imports without it.
"""
import textwrap


# quantity -> (vmin, vmax): the colour range of that quantity in every figure
RELEVANCE_RANGE = (0.0, 1.0)      # a head's share of its layer's relevance (rows sum to 1)
CONFIDENCE_RANGE = (0.0, 1.0)     # mean largest attention weight
SHARE_RANGE = (0.0, 1.0)          # share of queries (positional offset, rarest word)
ATTENTION_RANGE = (0.0, 1.0)      # one attention weight
MARGIN_POINTS_RANGE = (-40.0, 40.0)  # syntactic accuracy minus its offset baseline, in points
DROP_POINTS_RANGE = (-30.0, 30.0)    # what switching a head off costs: need accuracy or BLEU, in points
RANGES = {"relevance": RELEVANCE_RANGE, "confidence": CONFIDENCE_RANGE, "share": SHARE_RANGE,
          "attention": ATTENTION_RANGE, "margin_points": MARGIN_POINTS_RANGE, "drop_points": DROP_POINTS_RANGE}
# quantity -> colour map (the same quantity in the same colours everywhere)
CMAPS = {"relevance": "Reds", "confidence": "Blues", "share": "viridis", "attention": "Blues",
         "margin_points": "RdBu_r", "drop_points": "RdBu_r"}

# the head functions (Figure 8's kind): role -> colour, in the order a head with several roles is coloured
ROLE_COLOURS = {"positional": "tab:blue", "syntactic": "tab:orange", "rare": "tab:red"}
ROLE_LETTERS = {"positional": "P", "syntactic": "S", "rare": "R"}
NO_ROLE_COLOUR = "lightgray"
PRUNED_COLOUR = "white"
# the three attention types (Figure 9's kind): kind -> (name, colour)
KIND_NAMES = {"enc": "encoder self-attention", "dec_self": "decoder self-attention",
              "dec_enc": "decoder-encoder attention"}
KIND_COLOURS = {"enc": "tab:green", "dec_self": "tab:purple", "dec_enc": "tab:brown"}


def colour_range(quantity):
    """(vmin, vmax) of ``quantity`` (a key of :data:`RANGES`)."""
    return RANGES[quantity]


def new_figure(nrows=1, ncols=1, figsize=None, **kw):
    """``plt.subplots`` with constrained layout (titles, colour bars and labels never overprint one another) and
    ``squeeze=False``: returns (figure, 2-D array of axes)."""
    import matplotlib.pyplot as plt   # here: the package imports without matplotlib (see the module docstring)
    return plt.subplots(nrows, ncols, figsize=figsize, layout="constrained", squeeze=False, **kw)


def integer_ticks(ax, n_x=None, n_y=None, x_labels=None, y_labels=None):
    """Ticks at 0 .. n-1 (heads, layers) on the x and/or y axis, labelled by the integers (or by ``*_labels``)."""
    if n_x is not None:
        ax.set_xticks(range(n_x), [str(i) for i in range(n_x)] if x_labels is None else x_labels)
    if n_y is not None:
        ax.set_yticks(range(n_y), [str(i) for i in range(n_y)] if y_labels is None else y_labels)


def text_colour(rgba):
    """Black or white, whichever reads better on a cell of colour ``rgba``: by the colour's relative luminance
    (sRGB, WCAG), so a near-white cell gets black text whatever end of its colour map it lies at."""
    def lin(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(float(c)) for c in rgba[:3])
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.179 else "white"


def cell_text_colour(image, value):
    """:func:`text_colour` of the colour that the image ``image`` (an ``AxesImage``) gives ``value``."""
    return text_colour(image.cmap(image.norm(value)))


def wrap_title(text, width):
    """``text`` broken into lines of at most ``width`` characters (panel titles that would run into the next
    panel's)."""
    return "\n".join(textwrap.wrap(text, max(int(width), 8))) if text else text
