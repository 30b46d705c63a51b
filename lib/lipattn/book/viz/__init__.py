"""Book-only figures and explorers, one module per chapter's concept.

The mathematics lives in the top-level modules (:mod:`lipattn.softmax`, ...);
these modules only arrange it into figures. Their explorers are collected by
name in :data:`lipattn.book.explorers.EXPLORERS`; they import the explorer
mechanism (:mod:`lipattn.book.widgets`), never the registry, so importing this
package imports none of them.
"""
