# mpx — the front door. Nobody has to type a cmake command.
#   make                 build (checks and installs dependencies first)
#   make test            build + ctest, everything but the `slow` label
#   make deps            install the Debian packages (as root), or print the command
# See README.md for the experiment, plot, bench and regression targets.

BUILD      ?= build
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
SCALE      ?= small
SEEDS      ?= 1
MODELS     ?= resnet50 bert ssd
CMAKE_ARGS ?=
CTEST_ARGS ?=

.PHONY: all build deps deps-check configure test test-all check-sanitize check-valgrind clean help paper plots claims bench regress regress-update fuzz

all: build

help:
	@sed -n '1,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

deps:
	@bash cmake/deps.sh install

deps-check:
	@bash cmake/deps.sh check >/dev/null 2>&1 || bash cmake/deps.sh install

$(BUILD)/CMakeCache.txt: | deps-check
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >$(BUILD).configure.log 2>&1 \
	  || { cat $(BUILD).configure.log; exit 1; }

configure: $(BUILD)/CMakeCache.txt

build: deps-check configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest -LE slow --output-on-failure -j $(JOBS) $(CTEST_ARGS)

test-all: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own build folder.
# Optimised (-O2 -g): at -O0 the experiment smoke test never finished on 2 cores; ASan and UBSan
# check optimised code as well (their reports keep file and line through -g).
check-sanitize:
	@$(MAKE) --no-print-directory test BUILD=build-sanitize CMAKE_ARGS="-DMPX_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)"

# A 2-step ResNet-50 smoke run (with its final evaluation) under valgrind memcheck: exit 1 on any
# error or definite leak. tests/valgrind/third_party.supp explains its suppressions (oneDNN's JIT
# sgemm kernels read past their own packing buffers). Slow: 40 minutes on this 2-core machine while two training runs shared it.
check-valgrind: build
	@command -v valgrind >/dev/null || { echo "check-valgrind: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && OMP_NUM_THREADS=1 valgrind --error-exitcode=1 \
	  --errors-for-leak-kinds=definite --leak-check=full --suppressions=tests/valgrind/third_party.supp \
	  $(BUILD)/mpx train experiments/configs/resnet50/smoke/fp16_adaptive.cfg train.steps=2 train.eval_every=0 \
	  --out "$$tmp/run.h5" && echo "check-valgrind: no errors, no definite leaks"

# make experiment-formats [SCALE=smoke|small] [SEEDS=n] [PARALLEL=n]: the formats experiment
# (formats.list of resnet50 and bert: the 16-bit baselines, loss scaling, FP8 recipes, 16-bit
# fixed point), its figures and tables with the formats claims (docs/numerics.md).
experiment-formats: build
	@bash experiments/run_formats.sh $(SCALE) $(SEEDS)

# make experiment-<model> [SCALE=smoke|small|vgg|paper] [SEEDS=n] [DATA=/path/to/imagenet]
#                         [PARALLEL=n] [METHODS="fp32 fp16_adaptive"|core|master_weights|all]:
# every method of that model's methods.list at that scale (or those of METHODS; master_weights:
# the master-weights ablation, all: both), PARALLEL trainings at a time (default: one per core,
# each on one thread), then its figures and results table.
experiment-%: build
	@$(if $(DATA),EXTRA=data.root=$(DATA)) bash experiments/run_experiment.sh $* $(SCALE) $(SEEDS)

# Every experiment that exists (each model's methods and master-weights ablation), then every
# figure and reference table.
paper: build
	@for m in $(MODELS); do METHODS=all bash experiments/run_experiment.sh $$m $(SCALE) $(SEEDS) || exit 1; done

# Figures, summaries and tables again from existing run files (a model without run files keeps
# its committed summaries and figures).
plots: build
	@for m in $(MODELS); do python3 experiments/report.py summarize $$m $(SCALE) && \
	  { bash plots/figures.sh $$m $(SCALE) || true; } && python3 experiments/report.py table $$m $(SCALE) || exit 1; done

# Every claim of the papers with its verdict, from the run summaries (committed ones in a clean
# clone): results/reference/<model>/<scale>/table.md ends with them, claims.csv beside it. Every
# committed scale of each model unless SCALE is given on the command line or in the environment.
claims:
	@python3 experiments/report.py claims $(MODELS) \
	  $(if $(filter command line environment,$(origin SCALE)),--scale $(SCALE))

# The standard benchmark set: step time, samples/s, GFLOP/s vs sgemm, memory, overheads (JSON in
# results/bench/); then, where PyTorch is installed, mpx against the PyTorch CPU peers of the three
# models in fp32/bf16/fp16 (experiments/peers/compare.sh; PEER_ROUNDS rounds, default 3).
bench: build
	@bash experiments/bench.sh

# Accuracy and speed against results/baselines/*.json (exit 1 on a regression, with a table).
regress: build
	@python3 experiments/regress.py $(REGRESS_FLAGS)

# Measure again (3 seeds) and rewrite the baselines: make regress-update REASON="why".
regress-update: build
	@python3 experiments/regress.py --update --reason "$(REASON)"

# libFuzzer targets (config parser, VOC XML, IDX, WordPiece vocab/text, JPEG) under ASan +
# UBSan, FUZZ_SECONDS each (default 60), in build-fuzz/.
fuzz: deps-check
	@bash tests/fuzz/run.sh

clean:
	rm -rf $(BUILD) build-sanitize build-fuzz $(BUILD).configure.log
