# Thin wrapper around CMake presets. `make tour` and `make test` install what is missing
# (as root, with apt-get), configure, build, and run.
#
#   make tour      build and run `tvlab tour` (every chapter's documented examples)
#   make test      build and run every test (ctest)
#   make docs      Doxygen HTML in build/default/docs/html/index.html
#   make bench     run every chapter's benchmarks
#   make results   regenerate chapters/*/results.md
#   make exercises build with the exercise stubs and run the exercise tests (they fail until solved)
#   make sanitize  the debug preset (AddressSanitizer + UBSan) and its tests

JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# ccache (used when installed) keeps its cache in the home directory, or in build/ without one.
export CCACHE_DIR ?= $(if $(HOME),$(HOME)/.cache/ccache,$(CURDIR)/build/.ccache)
BUILD := build/default
TVLAB := $(BUILD)/chapters/tvlab
CHAPTERS := $(notdir $(wildcard chapters/[0-9][0-9]_*))

.PHONY: deps configure build tour test docs bench results check-results student-stubs exercises check-exercises sanitize clean

deps:
	@bash scripts/install_deps.sh

configure: deps
	cmake --preset default

build: configure
	cmake --build $(BUILD) -j $(JOBS)

tour: build
	$(TVLAB) tour

test: build
	ctest --preset default -j $(JOBS)

docs: configure
	cmake --build $(BUILD) --target docs

bench: build
	@for ch in $(CHAPTERS); do $(BUILD)/chapters/bench_$$ch --benchmark_counters_tabular=true || exit 1; done

# The lessons' figures: each is one `tvlab` command, listed here so CI can regenerate them.
FIGURES := docs/figures/ch00_causal_attention.svg docs/figures/ch01_post_ln_vs_pre_ln.svg \
           docs/figures/ch02_frequency_scaling.svg docs/figures/ch02_logit_decay.svg \
           docs/figures/ch04_io_model.svg
figure_cmd_docs/figures/ch00_causal_attention.svg := attention --causal --seq 8 --head-dim 4 --heads 1 --backend ref
figure_cmd_docs/figures/ch01_post_ln_vs_pre_ln.svg := norm
figure_cmd_docs/figures/ch02_frequency_scaling.svg := rope --figure scaling --factor 4
figure_cmd_docs/figures/ch02_logit_decay.svg := rope --figure decay
figure_cmd_docs/figures/ch04_io_model.svg := flash

results: build
	@for ch in $(CHAPTERS); do $(TVLAB) $$ch --markdown > chapters/$$ch/results.md || exit 1; echo "wrote chapters/$$ch/results.md"; done
	@$(foreach f,$(FIGURES),$(TVLAB) $(figure_cmd_$(f)) --svg $(f) > /dev/null || exit 1; echo "wrote $(f)";)

check-results: build
	@for ch in $(CHAPTERS); do \
	  $(TVLAB) $$ch --markdown | diff -u chapters/$$ch/results.md - > /dev/null || \
	  { echo "chapters/$$ch/results.md is stale: run 'make results' and commit"; \
	    $(TVLAB) $$ch --markdown | diff -u chapters/$$ch/results.md - | head -40; exit 1; }; \
	done; echo "results.md files are up to date"
	@unlisted="$(filter-out $(FIGURES),$(wildcard docs/figures/*.svg))"; \
	  if [ -n "$$unlisted" ]; then echo "figures not made by any command in FIGURES: $$unlisted"; exit 1; fi
	@mkdir -p build/figures
	@$(foreach f,$(FIGURES),$(TVLAB) $(figure_cmd_$(f)) --svg build/figures/$(notdir $(f)) > /dev/null || exit 1; \
	  cmp -s $(f) build/figures/$(notdir $(f)) || { echo "$(f) is stale: run 'make results' and commit"; exit 1; };)
	@echo "figures are up to date"

student-stubs:
	python3 scripts/make_student.py

exercises: deps
	cmake --preset student
	cmake --build build/student -j $(JOBS)
	-ctest --preset student -j $(JOBS)

check-exercises: deps
	python3 scripts/make_student.py --check
	cmake --preset student
	cmake --build build/student -j $(JOBS)
	python3 scripts/check_exercises.py build/student

sanitize: deps
	cmake --preset debug
	cmake --build build/debug -j $(JOBS)
	ctest --preset debug -j $(JOBS)

clean:
	rm -rf build
