# Thin wrapper around CMake presets. `make tour` and `make test` install what is missing
# (as root, with apt-get), configure, build, and run.
#
#   make tour      build and run `tvlab tour` (every chapter's documented examples)
#   make test      build and run every test (ctest)
#   make docs      Doxygen HTML in build/default/docs/html/index.html
#   make bench     run every chapter's benchmarks
#   make results   regenerate chapters/*/results.md
#   make exercises build and run the exercise tests over exercises/*/student.cpp (they fail until
#                  solved), then list which exercises are solved; EXERCISE=00 for one chapter
#   make reset-exercise EXERCISE=00.2  one exercise back to its stub (EXERCISE=00: a whole chapter),
#                  the replaced student.cpp kept as student.cpp.<date-time>.bak
#   make student-stubs  regenerate the stubs after editing a solution.cpp (refuses a student.cpp
#                  that holds edits; FORCE=1 overwrites it, keeping a backup)
#   make check-template  a copy of chapters/_template builds and runs as a chapter
#   make sanitize  the debug preset (AddressSanitizer + UBSan): builds the test programs only, runs them

JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# ccache (used when installed) keeps its cache in the home directory, or in build/ without one.
export CCACHE_DIR ?= $(if $(HOME),$(HOME)/.cache/ccache,$(CURDIR)/build/.ccache)
# The test programs and the command compile with precompiled headers (CMake's -include of
# cmake_pch.hxx); ccache caches such compilations only with this sloppiness.
export CCACHE_SLOPPINESS ?= pch_defines,time_macros,include_file_mtime,include_file_ctime
# Paths below the checkout are hashed relative to it, so a fresh clone elsewhere reuses the cache.
export CCACHE_BASEDIR ?= $(CURDIR)
BUILD := build/default
TVLAB := $(BUILD)/chapters/tvlab
CHAPTERS := $(notdir $(wildcard chapters/[0-9][0-9]_*))

.PHONY: deps configure build tour test docs bench results check-results student-stubs reset-exercise exercises check-exercises check-template sanitize clean

deps:
	@bash scripts/install_deps.sh
	@bash scripts/python_env.sh
	@bash scripts/ggml_quants_check.sh --fetch

# A build folder configured earlier with another generator is reconfigured from scratch (CMake
# refuses to switch generators in place); its compiled objects stay in ccache.
reset-generator = grep -qs '^CMAKE_GENERATOR:INTERNAL=Ninja$$' $(1)/CMakeCache.txt || rm -rf $(1)/CMakeCache.txt $(1)/CMakeFiles

configure: deps
	@$(call reset-generator,$(BUILD))
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

# The lessons' figures: each chapter declares its own (`tvlab list --figures` prints
# "<file><tab><command>"), and `tvlab <command> --svg <file>` makes each one.
FIGURES_CMD = $(TVLAB) list --figures

results: build
	@for ch in $(CHAPTERS); do $(TVLAB) $$ch --markdown > chapters/$$ch/results.md || exit 1; echo "wrote chapters/$$ch/results.md"; done
	@$(FIGURES_CMD) | while IFS="$$(printf '\t')" read -r file command; do \
	  $(TVLAB) $$command --svg "$$file" > /dev/null || exit 1; echo "wrote $$file"; done

check-results: build
	@for ch in $(CHAPTERS); do \
	  $(TVLAB) $$ch --markdown | diff -u chapters/$$ch/results.md - > /dev/null || \
	  { echo "chapters/$$ch/results.md is stale: run 'make results' and commit"; \
	    $(TVLAB) $$ch --markdown | diff -u chapters/$$ch/results.md - | head -40; exit 1; }; \
	done; echo "results.md files are up to date"
	@listed="$$($(FIGURES_CMD) | cut -f1)"; \
	  for f in docs/figures/*.svg; do echo "$$listed" | grep -qx "$$f" || \
	    { echo "$$f is made by no chapter's figures (tvlab list --figures)"; exit 1; }; done
	@mkdir -p build/figures
	@$(FIGURES_CMD) | while IFS="$$(printf '\t')" read -r file command; do \
	  $(TVLAB) $$command --svg "build/figures/$$(basename "$$file")" > /dev/null || exit 1; \
	  cmp -s "$$file" "build/figures/$$(basename "$$file")" || { echo "$$file is stale: run 'make results' and commit"; exit 1; }; \
	done
	@echo "figures are up to date"

student-stubs:
	python3 scripts/make_student.py $(if $(FORCE),--force)

reset-exercise:
	@test -n "$(EXERCISE)" || { echo "usage: make reset-exercise EXERCISE=00.2 (one exercise) or EXERCISE=00 (a chapter)"; exit 2; }
	python3 scripts/make_student.py --reset $(EXERCISE)

# The exercise tests print each failure in full (the preset's output-on-failure), then the summary
# of which exercises are solved; the exit status is ctest's: non-zero while any test fails.
EXERCISE_LABEL = $(if $(EXERCISE),-L '^exercise-$(firstword $(subst ., ,$(EXERCISE)))$$')
exercises: build
	@status=0; ctest --preset exercises -j $(JOBS) $(EXERCISE_LABEL) || status=$$?; \
	  python3 scripts/check_exercises.py --summary $(BUILD) $(EXERCISE) || status=1; exit $$status

check-exercises: build
	python3 scripts/make_student.py --check
	python3 scripts/check_exercises.py $(BUILD)

# Copies chapters/_template (and its tests/ and exercises/ twins) to a new chapter, builds, and
# checks that it is listed, toured and tested; then removes the copy.
check-template: build
	bash scripts/check_template.sh $(BUILD)

sanitize: deps
	@$(call reset-generator,build/debug)
	cmake --preset debug
	cmake --build build/debug -j $(JOBS) --target tvlab_tests
	ctest --preset debug -j $(JOBS)

clean:
	rm -rf build
