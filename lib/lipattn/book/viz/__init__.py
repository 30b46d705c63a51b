"""Book-only figures and explorers, one module per chapter's concept.

The mathematics lives in the top-level modules (:mod:`lipattn.softmax`, ...);
these modules only arrange it into figures. Importing this package registers
every explorer in :data:`lipattn.book.widgets.EXPLORERS`.
"""

from . import collapse, lipschitz, lm, prenorm, real, scaling, softmax, spectral  # noqa: F401
