# The two commands of a fresh clone:  make reproduce  and  make test.
# Both create .venv (CPU path, pinned) when it is missing or out of date.

PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
PROFILE ?= cpu
STAMP   := $(VENV)/.installed
LAB     := $(VENV)/.lab-installed
CHROMIUM := /usr/bin/chromium
DASKCFG := $(VENV)/etc/dask/spec_lib.yaml
# The git clean filter of *.ipynb (.gitattributes): outputs, execution counts and the metadata that
# JupyterLab and papermill add are stripped; cell ids are kept (tests/test_notebooks.py reads this line).
NBSTRIPOUT := -m nbstripout --keep-id --extra-keys "metadata.language_info.codemirror_mode metadata.language_info.file_extension metadata.language_info.mimetype metadata.language_info.nbconvert_exporter metadata.language_info.pygments_lexer metadata.language_info.version metadata.papermill metadata.widgets cell.metadata.papermill cell.metadata.execution"

.PHONY: reproduce test report lab lab-check benchmark clean-runs help

help:
	@echo "make reproduce   run every notebook at PROFILE=$(PROFILE) (results/, figures/)"
	@echo "make test        the test suite (every notebook at the smoke profile included)"
	@echo "make report      the executed notebooks of PROFILE=$(PROFILE) as a static site: report/$(PROFILE)/index.html"
	@echo "make benchmark   decoder-overhead benchmark (benchmarks/decode_overhead.py)"
	@echo "make lab         JupyterLab in the project's environment (repository root, notebooks/ open)"
	@echo "make lab-check   Run All of three notebooks in JupyterLab in headless Chromium; screenshots in lab-check/"

$(STAMP): pyproject.toml requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m ipykernel install --prefix $(VENV) --name spec-lib --display-name "spec-lib (.venv)" >/dev/null
	@# .gitattributes names the nbstripout filter; define it in this clone's git config, so a
	@# notebook saved from JupyterLab is committed without outputs (kept out of a copy without .git).
	if git rev-parse --git-dir >/dev/null 2>&1; then \
		git config filter.nbstripout.clean '$(PY) $(NBSTRIPOUT)' && \
		git config filter.nbstripout.smudge cat && git config filter.nbstripout.required true; fi
	touch $(STAMP)

# The project's Dask configuration (config/dask.yaml: why), where Dask reads it in this environment.
$(DASKCFG): config/dask.yaml $(STAMP)
	mkdir -p $(dir $@)
	cp config/dask.yaml $@

reproduce: $(STAMP) $(DASKCFG)
	$(PY) -m spec_lib.run --profile $(PROFILE)

test: $(STAMP) $(DASKCFG) $(CHROMIUM)
	$(PY) -m pytest

# The pages of runs/$(PROFILE)/ (what make reproduce executed) with their findings, and an index.
report: $(STAMP)
	$(PY) -m spec_lib.notebook.report --profile $(PROFILE)

# tests/test_report.py opens the report in Debian's Chromium (Playwright drives it; no browser download).
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "make: installing Debian's chromium for tests/test_report.py"; \
		apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; \
	else echo "make: tests/test_report.py needs Chromium at $(CHROMIUM): sudo apt-get install chromium" >&2; exit 1; fi

benchmark: $(STAMP) $(DASKCFG)
	$(PY) benchmarks/decode_overhead.py

$(LAB): $(STAMP) $(DASKCFG) requirements-lab.txt
	$(PY) -m pip install --quiet -r requirements-lab.txt
	touch $(LAB)

# Serves the repository root (README, params/, figures/ in the file browser) and opens notebooks/.
# As root (containers, cloud notebooks) Jupyter refuses to start without --allow-root: pass it, say so.
lab: $(LAB)
	@if [ "$$(id -u)" = 0 ]; then echo "make lab: running as root, so starting JupyterLab with --allow-root"; fi
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/notebooks \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root ) $(LAB_ARGS)

# Needs a Chromium (Debian: apt-get install chromium).  Screenshots and report.json in lab-check/.
lab-check: $(LAB)
	$(PY) tools/lab_check.py --out lab-check 00_quickstart 11_packed_ss_greedy 21_deer_decoding

clean-runs:
	rm -rf runs/ results/smoke/ figures/smoke/
