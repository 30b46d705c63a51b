# The book's commands. Needs only python3 (>= 3.11) and make; everything else
# is installed into .venv from requirements.txt.
#
#   make book    build the site (chapters executed) and serve it on 127.0.0.1:8000
#   make html    build the site into _build/html: English, then the Chinese edition
#                in _build/html/zh (html-en, html-zh build one of them)
#   make gettext regenerate the .pot files and update locale/zh_CN/LC_MESSAGES/*.po
#   make test    lint, unit/property tests, notebooks, the -n -W build, the browser test
#   make bench   the benchmarks
#   make lab     JupyterLab, with chapters opening as notebooks

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8000
# matplotlib's font cache lives with the venv: a cache in ~/.cache/matplotlib that another
# venv wrote (or rebuilt while its files were being removed) can lack matplotlib's own STIX
# fonts, and every figure then warns on stderr, which fails the -W build.
export MPLCONFIGDIR ?= $(CURDIR)/$(VENV)/matplotlib
JB_FLAGS := -n -W --keep-going

.PHONY: venv book html html-en html-zh gettext serve test lint unit notebooks browser-deps browser bench lab clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $@

# The Chinese edition (Sphinx gettext, locale/README.md) reuses the English
# build's execution cache: html-zh executes nothing that html-en has run.
html: html-en html-zh

html-en: $(STAMP)
	$(BIN)/jupyter-book build . --builder html $(JB_FLAGS)

html-zh: $(STAMP)
	$(BIN)/python -m lipattn.book.edition build $(JB_FLAGS)

# The English source's messages (.pot, notebooks not executed) merged into the
# catalogues: changed English becomes fuzzy or untranslated entries.
gettext: $(STAMP)
	$(BIN)/python -m lipattn.book.edition gettext

book: html serve

serve:
	@echo "Serving _build/html at http://127.0.0.1:$(PORT)  (Ctrl-C to stop)"
	$(BIN)/python -m http.server $(PORT) --bind 127.0.0.1 --directory _build/html

lint: $(STAMP)
	$(BIN)/ruff check lib tests benchmarks chapters

unit: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "not book and not browser" tests

# Headless Chromium for the browser test, from Debian's packages.
browser-deps:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  echo "Installing chromium and chromium-driver with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	fi
	@if [ -z "$$(fc-list :lang=zh 2>/dev/null)" ]; then \
	  echo "Installing a CJK font (fonts-noto-cjk) for the Chinese review sheet"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk; \
	fi

browser: $(STAMP) browser-deps
	$(BIN)/python -m pytest -m "book or browser" tests

test: $(STAMP) browser-deps
	$(MAKE) lint
	$(MAKE) unit
	$(MAKE) html
	$(MAKE) browser

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

lab: $(STAMP)
	JUPYTERLAB_SETTINGS_DIR=$(CURDIR)/.jupyter/lab/user-settings \
	  $(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=$(CURDIR) \
	  $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

clean:
	rm -rf _build
