"""The book's own machinery, built on the mathematics in :mod:`lipattn`.

Nothing here is needed to compute a Lipschitz constant; it is what the chapters
use to show them:

- :mod:`lipattn.book.widgets` -- explorers: one definition, a live widget in a kernel
  and a precomputed frame player on the static site;
- :mod:`lipattn.book.explorers` -- the registry of every chapter's explorer, by name;
- :mod:`lipattn.book.player` -- the static frame player's script and style sheet;
- :mod:`lipattn.book.viz` -- each chapter's experiments, figures and explorers;
- :mod:`lipattn.book.prenorm` -- Chapter 4's experiments on the book's encoder: gradients
  at initialisation, depth scaling, the amplification effect, interventions on training;
- :mod:`lipattn.book.sensitivity` -- the audit's input sensitivity of deep stacks:
  end-to-end against per-layer Jacobians;
- :mod:`lipattn.book.plotting` -- the book's plot style, captions and alt text;
- :mod:`lipattn.book.quiz` -- self-check quizzes that work with and without a kernel;
- :mod:`lipattn.book.interview` -- the chapters' interview answers, English and Chinese
  side by side in ``chapters/interview/*.yml``, with a staleness hash of the English;
- :mod:`lipattn.book.audit` -- the interview card's claims and verdicts;
- :mod:`lipattn.book.pretrained` -- the book's trained reversal encoders: shipped weights,
  the script that regenerates them, and the statements the chapters make about them;
- :mod:`lipattn.book.sphinxext` -- the Sphinx extension that builds the site.
"""
