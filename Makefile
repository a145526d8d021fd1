# ampc - a compiler from model definitions to mixed-precision training programs.
#
#   make            build/ampc
#   make check      every test: unit, golden (FileCheck), round trip, ci-check, the
#                   suite again under ASan+UBSan, fuzz replay + a fixed fuzz run,
#                   valgrind on the compiler
#   make demo       the main job (README)
#   make deps       install what the build and the demo need (tools/deps.txt;
#                   Debian, as root); make deps-test adds the tests' packages
#   make fuzz FUZZ_SECONDS=N, make bench, make install PREFIX=...

CC      ?= cc
# Quiet rules: a short line per step (the demo's first screen is about the
# model, not 100 compiler commands); make V=1 prints every command in full.
V       ?= 0
quiet    = $(if $(filter 1,$(V)),,@printf '  %-6s %s\n' '$(1)' '$(2)';)
CFLAGS  ?= -O2 -g
PREFIX  ?= /usr/local
BUILD   ?= build
FUZZ_SECONDS ?= 60

DATA_DIR  := $(CURDIR)/build/data
# FileCheck: tests/golden/run.sh finds it (llvm-14-tools) or takes FILECHECK
# from the environment or make's command line.  Not looked up here: make check
# would fix the value before its own deps-test installs the package.

# -Wvla: no stack buffer may be sized by the input (a Concat can have millions of inputs).
AMPC_CFLAGS := -std=c11 -Wall -Wextra -Werror -Wvla -D_GNU_SOURCE -Iir -Igrammar -Ipasses -Icompiler \
               -I$(BUILD)/gen -MMD -MP
GEN_CFLAGS  := -Wno-unused-function -Wno-sign-compare -Wno-unused-parameter \
               -Wno-unused-but-set-variable -Wno-unknown-warning-option -Wno-unreachable-code

# runtime/settings.c: the train settings' parsers, shared with the runtime (a leaf);
# runtime/fileio.c: the one file-safety module of ampc, the programs and im2rec (a leaf).
LIB_SRC  := $(wildcard ir/*.c ir/ops/*.c passes/*.c codegen/*.c) grammar/ast.c compiler/frontend.c \
            compiler/report.c compiler/opref.c compiler/cli.c compiler/mxnet_json.c \
            compiler/mxnet_export.c compiler/calibrate.c runtime/settings.c runtime/fileio.c \
            compiler/json.c compiler/provenance.c compiler/dump.c compiler/stages.c compiler/expect.c \
            compiler/diff.c runtime/build_info.c runtime/suggest.c
GEN_SRC  := $(BUILD)/gen/parser.c $(BUILD)/gen/lexer.c
LIB_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC)) $(GEN_SRC:.c=.o)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))

# The runtime: what emitted programs link (never the compiler).
# -ffp-contract=off: no a*b+c becomes an FMA behind the code's back (clang
# contracts by default, gcc -std=c11 does not), so the kernels round the same
# whichever compiler builds them, and as their CUDA twins (-fmad=false).
RT_CFLAGS := -std=c11 -Wall -Wextra -Werror -ffp-contract=off -D_GNU_SOURCE -Iruntime -MMD -MP
RT_SRC   := $(wildcard runtime/*.c runtime/cpu/*.c runtime/data/*.c)
# The engines of several devices (runtime/dist/): the program without MPI and its
# launcher check, --sim-ranks, the GPU placements' host logic (coll.h: the NCCL
# engine's buckets and bootstrap, local/device); mpi.c is ampcmpi.o's.
RT_SRC   += $(filter-out runtime/dist/mpi.c,$(wildcard runtime/dist/*.c))
RT_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(RT_SRC))
RT_LIBS  := -lopenblas -lz -lm
# json-c (libjson-c-dev): ampc --from-mxnet reads MXNet symbol JSON with it (and ampc diff
# and --expect the JSON documents); nettle (nettle-dev): the SHA-256 of provenance.
JSON_LIBS := $(shell pkg-config --libs json-c 2>/dev/null || echo -ljson-c) -lnettle
# The emulator's tests link libampcemu.a and run in emu-check (below), not the plain loop.
EMU_TEST_SRC := tests/runtime/test_cuda_emu.c tests/runtime/test_cuda_ops_emu.c \
                tests/runtime/test_cuda_layout_emu.c tests/runtime/test_emu_checker.c \
                tests/runtime/test_gpucost_emu.c tests/runtime/test_cuda_synthetic_emu.c \
                tests/runtime/test_cuda_ingest_emu.c
RTEST_SRC := $(filter-out $(EMU_TEST_SRC),$(wildcard tests/runtime/test_*.c))
RTEST_BIN := $(patsubst tests/runtime/%.c,$(BUILD)/rtests/%,$(RTEST_SRC))
# cuda-check loads the real cuDNN, cuBLAS(Lt) and NCCL (cuda_libs_smoke); not under ASan
CUDA_LIBS_SMOKE ?= 1
NVCC     ?= $(firstword $(wildcard /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null))

.PHONY: FORCE fuzzlib e2e data nvcc-check all check unit golden roundtrip ci-check asan-check fuzz-check valgrind-check fuzz bench demo \
        deps deps-test ops-doc install clean format mxnet-env mxnet-check
all: $(BUILD)/ampc $(BUILD)/im2rec cuda

# ---- the compiler ----------------------------------------------------------
# One run of each generator makes both of its outputs (`&:` is a grouped
# target), so `make -j` never runs bison or flex twice at once.
$(BUILD)/gen/parser.c $(BUILD)/gen/parser.h &: grammar/parser.y
	@mkdir -p $(@D)
	$(call quiet,BISON,$<)bison -d -o $(BUILD)/gen/parser.c $<

$(BUILD)/gen/lexer.c $(BUILD)/gen/lexer.h &: grammar/lexer.l $(BUILD)/gen/parser.h
	@mkdir -p $(@D)
	$(call quiet,FLEX,$<)flex --header-file=$(BUILD)/gen/lexer.h -o $(BUILD)/gen/lexer.c $<

$(BUILD)/gen/%.o: $(BUILD)/gen/%.c
	$(call quiet,CC,$<)$(CC) $(AMPC_CFLAGS) $(GEN_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(BUILD)/gen/parser.h $(BUILD)/gen/lexer.h
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(AMPC_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/libampc.a: $(LIB_OBJ)
	$(call quiet,AR,$@)rm -f $@ && ar rcs $@ $^

$(BUILD)/obj/runtime/%.o: runtime/%.c
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(RT_CFLAGS) $(CFLAGS) $(RT_DEFINES) -c $< -o $@

# The release version (ir/ir.h's AMPC_VERSION, the one place it is written)
# and the git revision of the checkout ("-dirty" with uncommitted changes;
# empty outside a checkout), for --version only: runtime/build_info.c and
# compiler/cli.c include BUILD/gen/version.h, which is rewritten only when
# they change, so a commit relinks ampc and the runtime and rebuilds nothing
# else.  build_info.c also holds the data directory (make install puts its
# own in the installed runtime).
AMPC_RELEASE := $(shell sed -n 's/^\#define AMPC_VERSION "\(.*\)"$$/\1/p' ir/ir.h)
GIT_REV := $(shell r=$$(git -C "$(CURDIR)" rev-parse --short=12 HEAD 2>/dev/null) && \
             { git -C "$(CURDIR)" diff --quiet HEAD -- 2>/dev/null || r="$$r-dirty"; } && echo "$$r")
$(BUILD)/gen/version.h: FORCE
	@mkdir -p $(@D)
	@printf '#define AMPC_RELEASE_VERSION "%s"\n#define AMPC_GIT_REV "%s"\n' \
	    '$(AMPC_RELEASE)' '$(GIT_REV)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; fi
$(BUILD)/obj/runtime/build_info.o: RT_DEFINES = -I$(BUILD)/gen -DAMPC_DEFAULT_DATA_DIR='"$(DATA_DIR)"'
$(BUILD)/obj/runtime/build_info.o $(BUILD)/obj/compiler/cli.o: $(BUILD)/gen/version.h

$(BUILD)/libampcrt.a: $(RT_OBJ)
	$(call quiet,AR,$@)rm -f $@ && ar rcs $@ $^

# The MPI engine (runtime/dist/mpi.c, docs/kvstore.md): an object that only
# programs built with ampc --mpi link, compiled with mpicc where it exists
# (Open MPI: make deps-test); no -Iruntime, so <mpi.h> is Open MPI's (-iquote
# runtime: the runtime's own "kernels/..." includes, as device.h's).
MPICC ?= $(shell command -v mpicc 2>/dev/null)
MPI_OBJ := $(if $(MPICC),$(BUILD)/ampcmpi.o)
$(BUILD)/ampcmpi.o: runtime/dist/mpi.c runtime/dist/mpi_rt.h runtime/device.h runtime/program.h runtime/rt.h \
                    runtime/settings.h runtime/kernels/lossscale.h
	@mkdir -p $(@D)
	$(call quiet,MPICC,$<)$(MPICC) -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -iquote runtime $(CFLAGS) -c $< -o $@

# A program for a GPU (ampc --target=cuda) links the toolkit's static cudart
# from the lib64 beside nvcc (codegen/build.c; $AMPC_CUDA_HOME overrides).
$(BUILD)/obj/codegen/build.o: AMPC_CFLAGS += $(if $(NVCC),-DAMPC_CUDA_LIBDIR='"$(abspath $(dir $(NVCC))../lib64)"')

# ampc finds the runtime next to itself (codegen/build.c), so it is built too.
$(BUILD)/ampc: $(BUILD)/obj/compiler/main.o $(BUILD)/libampc.a | $(BUILD)/libampcrt.a $(MPI_OBJ)
	$(call quiet,LINK,$@)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) -lm

# ---- tests -----------------------------------------------------------------
$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libampc.a
	@mkdir -p $(@D)
	$(CC) $(AMPC_CFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libampc.a $(LDFLAGS) -lcmocka $(JSON_LIBS) -lm

unit: $(UNIT_BIN) $(RTEST_BIN) $(BUILD)/rtests/tiny_train nvcc-check cuda-check nccl-check nccl-mpi-check $(DATA_DIR)/digits.csv.gz
	@set -e; for t in $(UNIT_BIN) $(RTEST_BIN); do echo "== $$t"; AMPC_DATA_DIR=$(DATA_DIR) $$t; done
	tests/runtime/device_seam.sh $(CURDIR) $(BUILD)/libampcrt.a
	@echo "== tiny_train (the runtime's main on a hand-written model)"
	$(BUILD)/rtests/tiny_train --data synthetic --max-steps 20 --log-interval 10 >/dev/null
	test "$$($(BUILD)/rtests/tiny_train --bogus 2>/dev/null; echo $$?)" = 2

$(BUILD)/rtests/tiny_train: tests/runtime/model_tiny.c $(BUILD)/libampcrt.a
	@mkdir -p $(@D)
	$(CC) $(RT_CFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libampcrt.a $(LDFLAGS) $(RT_LIBS)

$(BUILD)/rtests/%: tests/runtime/%.c $(BUILD)/libampcrt.a
	@mkdir -p $(@D)
	$(CC) $(RT_CFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libampcrt.a $(LDFLAGS) -lcmocka $(RT_LIBS)

# The NCCL engine's tests run it over the in-process fake transport
# (tests/runtime/nccl_fake.c), which no program links: it is not in libampcrt.a.
$(BUILD)/rtests/test_nccl_fake: tests/runtime/test_nccl_fake.c tests/runtime/nccl_fake.c \
                                tests/runtime/nccl_fake.h $(BUILD)/libampcrt.a
	@mkdir -p $(@D)
	$(CC) $(RT_CFLAGS) -Itests/runtime $(CFLAGS) -o $@ $< tests/runtime/nccl_fake.c \
	    $(BUILD)/libampcrt.a $(LDFLAGS) -lcmocka $(RT_LIBS) -lpthread

# The element math shared by the CPU and CUDA kernels must compile with nvcc
# too, so the two cannot drift; skipped (and said so) where nvcc is absent.
nvcc-check:
	@if [ -n "$(NVCC)" ] && [ -f tests/runtime/kernels_check.cu ]; then \
	    mkdir -p $(BUILD)/nvcc && \
	    $(NVCC) -std=c++17 -Iruntime -arch=sm_80 -Werror all-warnings -o $(BUILD)/nvcc/kernels_check tests/runtime/kernels_check.cu && \
	    echo "nvcc-check: runtime/kernels/*.h compile with nvcc"; \
	else echo "nvcc-check: nvcc not found or no check file: skipped"; fi

# ---- the CUDA runtime library (runtime/cuda/, docs/backend-cuda.md) -----------
# Built where nvcc is (make says so where it is not): a fat binary for sm_80
# and sm_90 (+ compute_90 PTX), no FMA contraction, no fast math, no
# flush-to-zero, so the kernels round as their CPU twins.  ptxas -v's report
# and the PTX are kept for cuda-check.
.PHONY: cuda cuda-check
CUDA_SRC   := $(wildcard runtime/cuda/*.cu)
CUDA_DEPS  := $(wildcard runtime/cuda/*.h runtime/cuda/*.cuh runtime/kernels/*.h runtime/*.h)
NVCC_FLAGS := -std=c++17 -Iruntime -O3 -fmad=false -ftz=false -prec-div=true -prec-sqrt=true \
              -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90] \
              -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror
$(BUILD)/cuda/%.o: runtime/cuda/%.cu $(CUDA_DEPS)
	@mkdir -p $(BUILD)/cuda/keep/$*
	@echo "nvcc $< (sm_80, sm_90)"
	@$(NVCC) $(NVCC_FLAGS) -Xptxas -v --keep --keep-dir $(BUILD)/cuda/keep/$* -c $< -o $@ \
	    2>$(BUILD)/cuda/$*.ptxas.log || { cat $(BUILD)/cuda/$*.ptxas.log; exit 1; }

# The host side of cuDNN and cuBLASLt (conv.c, fc.c, pool.c, batchnorm.c, rt_cuda.c,
# check.c, the NCCL transport) and its
# CUDA-free logic (plan.c, libs.c): C, compiled by $(CC) against the
# toolkit's headers; cuDNN and cuBLASLt are opened at run time (libs.h).
CUDA_CSRC  := $(wildcard runtime/cuda/*.c)
CUDA_INC   := $(dir $(NVCC))../include
$(BUILD)/cuda/%.c.o: runtime/cuda/%.c $(CUDA_DEPS)
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(RT_CFLAGS) $(CFLAGS) -I$(CUDA_INC) -c $< -o $@

$(BUILD)/libampccuda.a: $(patsubst runtime/cuda/%.cu,$(BUILD)/cuda/%.o,$(CUDA_SRC)) \
                        $(patsubst runtime/cuda/%.c,$(BUILD)/cuda/%.c.o,$(CUDA_CSRC))
	$(call quiet,AR,$@)rm -f $@ && ar rcs $@ $^

cuda:
	@if [ -n "$(NVCC)" ]; then $(MAKE) --no-print-directory $(BUILD)/libampccuda.a; \
	else echo "SKIPPED: the CUDA runtime library $(BUILD)/libampccuda.a: no nvcc (install the CUDA toolkit or set NVCC=)"; fi

# A program links the CUDA device with libampcrt.a and the static cudart.
CUDA_LIBS := -L$(dir $(NVCC))../lib64 -lcudart_static -ldl -lpthread -lrt -lstdc++
$(BUILD)/cuda/cuda_device_smoke: tests/runtime/cuda_device_smoke.c $(BUILD)/libampccuda.a $(BUILD)/libampcrt.a
	$(CC) $(RT_CFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libampccuda.a $(BUILD)/libampcrt.a $(LDFLAGS) \
	    $(CUDA_LIBS) $(RT_LIBS)

$(BUILD)/cuda/cuda_kernels_gpu: tests/runtime/cuda_kernels_gpu.c $(BUILD)/libampccuda.a $(BUILD)/libampcrt.a
	$(CC) $(RT_CFLAGS) $(CFLAGS) -I$(dir $(NVCC))../include -o $@ $< $(BUILD)/libampccuda.a \
	    $(BUILD)/libampcrt.a $(LDFLAGS) $(CUDA_LIBS) $(RT_LIBS)

# The libraries found at run time and the checking macro's messages
# (runs here, no GPU needed), and cuDNN/cuBLASLt against the CPU on a GPU.
$(BUILD)/cuda/cuda_libs_smoke: tests/runtime/cuda_libs_smoke.c $(BUILD)/libampccuda.a $(BUILD)/libampcrt.a
	$(CC) $(RT_CFLAGS) $(CFLAGS) -I$(CUDA_INC) -o $@ $< $(BUILD)/libampccuda.a \
	    $(BUILD)/libampcrt.a $(LDFLAGS) $(CUDA_LIBS) $(RT_LIBS)

$(BUILD)/cuda/cuda_dnn_offline: tests/runtime/cuda_dnn_offline.c $(BUILD)/libampccuda.a $(BUILD)/libampcrt.a
	$(CC) $(RT_CFLAGS) $(CFLAGS) -I$(CUDA_INC) -o $@ $< $(BUILD)/libampccuda.a \
	    $(BUILD)/libampcrt.a $(LDFLAGS) $(CUDA_LIBS) $(RT_LIBS)

$(BUILD)/cuda/cuda_dnn_gpu: tests/runtime/cuda_dnn_gpu.c $(BUILD)/libampccuda.a $(BUILD)/libampcrt.a
	$(CC) $(RT_CFLAGS) $(CFLAGS) -I$(CUDA_INC) -o $@ $< $(BUILD)/libampccuda.a \
	    $(BUILD)/libampcrt.a $(LDFLAGS) $(CUDA_LIBS) $(RT_LIBS)

# The NCCL engine (runtime/dist/nccl_engine.c, runtime/cuda/nccl_transport.c; docs/kvstore.md) linked as a
# CUDA program links it, and NCCL's functions resolved by name (no GPU needed; under
# ASan, CUDA_LIBS_SMOKE=0, the link only).  Its host logic: test_nccl_fake, test_kv_local.
.PHONY: nccl-check
$(BUILD)/cuda/nccl_link_smoke: tests/runtime/nccl_link_smoke.c $(BUILD)/libampccuda.a $(BUILD)/libampcrt.a
	$(CC) $(RT_CFLAGS) $(CFLAGS) -I$(CUDA_INC) -o $@ $< $(BUILD)/libampccuda.a \
	    $(BUILD)/libampcrt.a $(LDFLAGS) $(CUDA_LIBS) $(RT_LIBS)
nccl-check: cuda
	@if [ -n "$(NVCC)" ]; then $(MAKE) --no-print-directory $(BUILD)/cuda/nccl_link_smoke && \
	    AMPC_CUDA_LIB_PATH=$${AMPC_CUDA_LIB_PATH:-$(dir $(NVCC))../lib64} \
	    $(BUILD)/cuda/nccl_link_smoke $(if $(filter 1,$(CUDA_LIBS_SMOKE)),,--link-only); \
	else echo "SKIPPED: nccl-check (the NCCL engine linked into a CUDA program): no nvcc"; fi

# The NCCL engine's bootstrap over real MPI: rank 0's unique id to every rank through the
# MPI engine's broadcast (tests/runtime/nccl_boot_mpi.sh, mpirun -np 2; no GPU, no NCCL).
.PHONY: nccl-mpi-check
$(BUILD)/rtests/nccl_boot_mpi: tests/runtime/nccl_boot_mpi.c $(BUILD)/ampcmpi.o $(BUILD)/libampcrt.a
	@mkdir -p $(@D)
	OMPI_CC=$(CC) $(MPICC) $(RT_CFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/ampcmpi.o \
	    $(BUILD)/libampcrt.a $(LDFLAGS) $(RT_LIBS)
nccl-mpi-check:
	@if [ -n "$(MPICC)" ] && command -v mpirun >/dev/null; then \
	    $(MAKE) --no-print-directory $(BUILD)/rtests/nccl_boot_mpi && \
	    tests/runtime/nccl_boot_mpi.sh $(BUILD)/rtests/nccl_boot_mpi; \
	else echo "SKIPPED: nccl-mpi-check (the NCCL bootstrap over MPI): no mpicc or mpirun (make deps-test)"; fi

# ---- the first GPU run (docs/backend-cuda.md, "The first GPU run") -------------
# Never part of check.  gpu-check-build puts what a run needs into
# $(BUILD)/gpu/, the pack (tests/gpu/gpu_check.sh --build-only: the models
# compiled for the GPU, the CPU reference states, the test programs, their
# shared libraries, the kit itself); gpu-check-pack packs it into
# $(BUILD)/gpu.tar.gz for a GPU machine, where tests/gpu/first_run.sh runs
# it with nothing compiled; gpu-check runs the kit here with --full;
# gpu-check-dry runs the kit without a GPU (in e2e, so it cannot rot:
# tests/gpu/first_run_dry.sh).
$(BUILD)/gpu/optim_bw: tests/gpu/optim_bw.c $(BUILD)/libampccuda.a $(BUILD)/libampcrt.a
	@mkdir -p $(@D)
	$(CC) $(RT_CFLAGS) $(CFLAGS) -I$(CUDA_INC) -o $@ $< $(BUILD)/libampccuda.a \
	    $(BUILD)/libampcrt.a $(LDFLAGS) $(CUDA_LIBS) $(RT_LIBS)

.PHONY: gpu-check gpu-check-build gpu-check-dry gpu-check-pack
gpu-check-build: $(BUILD)/ampc cuda $(BUILD)/e2e/statcmp
	@if [ -n "$(NVCC)" ]; then $(MAKE) --no-print-directory $(BUILD)/cuda/cuda_kernels_gpu \
	    $(BUILD)/cuda/cuda_device_smoke $(BUILD)/cuda/cuda_dnn_gpu $(BUILD)/cuda/cuda_libs_smoke \
	    $(BUILD)/gpu/optim_bw; fi
	tests/gpu/gpu_check.sh --build-only $(BUILD)

gpu-check: gpu-check-build
	tests/gpu/gpu_check.sh --no-build $(BUILD)

gpu-check-pack: gpu-check-build
	tar -czf $(BUILD)/gpu.tar.gz --exclude='*.d' -C $(BUILD) gpu

gpu-check-dry: gpu-check-pack
	tests/gpu/first_run_dry.sh $(BUILD)


# The kernels' PTX and registers (tests/runtime/cuda_ptx_check.sh), no state of the
# library's own (tests/runtime/cuda_state_check.sh: the run state is the device's), and the
# CUDA device linked as a program links it (tests/runtime/cuda_device_smoke.sh:
# without a GPU only its clean failure to open); the kernels themselves run
# emulated in unit (tests/runtime/test_cuda_emu.c).  The library discovery smoke
# test loads the toolkit's own cuDNN, cuBLAS(Lt) and NCCL: a fresh machine's
# loader cache does not list the toolkit, so it is named (AMPC_CUDA_LIB_PATH).
cuda-check: cuda $(if $(NVCC),$(BUILD)/cuda/kernel_vectorized)
	@if [ -n "$(NVCC)" ]; then tests/runtime/cuda_ptx_check.sh $(NVCC) $(BUILD)/cuda && \
	    tests/runtime/cuda_layout_ptx_check.sh $(BUILD)/cuda && \
	    tests/runtime/cuda_state_check.sh $(BUILD)/libampccuda.a "$(CC)" && \
	    if $(MAKE) --no-print-directory sass-env; then \
	        tests/runtime/cuda_sass_check.sh $(NVCC) $(BUILD)/cuda $(SASS_ENV)/bin \
	            $(BUILD)/cuda/kernel_vectorized; \
	    elif [ "$${AMPC_REQUIRE_SASS:-0}" = 1 ]; then \
	        echo "cuda-check: FAILED: the SASS tools' environment could not be made and AMPC_REQUIRE_SASS=1 (make sass-env)"; false; \
	    else echo "SKIPPED: the SASS check (tests/runtime/cuda_sass_check.sh): make sass-env could not install cuobjdump and nvdisasm from PyPI (above); CI sets AMPC_REQUIRE_SASS=1"; fi && \
	    $(MAKE) --no-print-directory $(BUILD)/cuda/cuda_device_smoke $(BUILD)/cuda/cuda_kernels_gpu \
	        $(BUILD)/cuda/cuda_libs_smoke $(BUILD)/cuda/cuda_dnn_gpu $(BUILD)/gpu/optim_bw \
	        $(BUILD)/cuda/cuda_dnn_offline && \
	    tests/runtime/cuda_device_smoke.sh $(BUILD)/cuda/cuda_device_smoke && \
	    if [ "$(CUDA_LIBS_SMOKE)" = 1 ]; then \
	        AMPC_CUDA_LIB_PATH=$${AMPC_CUDA_LIB_PATH:-$(dir $(NVCC))../lib64} $(BUILD)/cuda/cuda_libs_smoke && \
	        AMPC_CUDA_LIB_PATH=$${AMPC_CUDA_LIB_PATH:-$(dir $(NVCC))../lib64} $(BUILD)/cuda/cuda_dnn_offline; \
	    else echo "NOT RUN: cuda_libs_smoke and cuda_dnn_offline under ASan (its dlopen interceptor hides cuDNN's RUNPATH from cuDNN's own dlopens; the plain build runs them, and test_cuda_libs runs libs.c's search under ASan)"; fi; \
	else echo "SKIPPED: cuda-check (the PTX and register-spill checks of the CUDA kernels): no nvcc"; fi

# cuobjdump and nvdisasm for the SASS check (tests/runtime/cuda_sass_check.sh):
# NVIDIA's hash-pinned PyPI wheels in a virtual environment (the toolkit
# here ships neither), made once; SASS_ENV/bin holds both tools.  Where PyPI
# cannot be reached cuda-check says SKIPPED for the SASS check, as the MXNet
# tests do without their environment, unless AMPC_REQUIRE_SASS=1 (CI).
SASS_ENV ?= $(CURDIR)/build/sass-env
.PHONY: sass-env
sass-env: $(SASS_ENV)/.installed
$(SASS_ENV)/.installed: tests/runtime/sass/requirements.txt
	rm -rf $(SASS_ENV)
	python3 -m venv $(SASS_ENV)
	$(SASS_ENV)/bin/python -m pip install --no-input --disable-pip-version-check --require-hashes \
	    --no-deps --only-binary=:all: -q -r $<
	d=$$(echo $(SASS_ENV)/lib/python3*/site-packages/nvidia/cu13/bin) && \
	    chmod +x $$d/cuobjdump $$d/nvdisasm && \
	    ln -s $$d/cuobjdump $(SASS_ENV)/bin/cuobjdump && ln -s $$d/nvdisasm $(SASS_ENV)/bin/nvdisasm
	$(SASS_ENV)/bin/cuobjdump --version >/dev/null && $(SASS_ENV)/bin/nvdisasm --version >/dev/null
	touch $@
$(BUILD)/cuda/kernel_vectorized: tests/runtime/sass/kernel_vectorized.c ir/kernels.def
	@mkdir -p $(@D)
	$(CC) -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -o $@ $<

# ---- the CUDA kernels on the host: the emulator (runtime/emu/; docs/backend-cuda.md, "The emulator") ----
# The library's .cu files compiled by the host's C++ compiler ($(CC) -x c++: gcc, or clang in
# asan-check) against runtime/emu/emu_cuda.h, with the emulator, into libampcemu.a.  emu-check
# (part of unit, so of asan-check too) runs the tests that link it, then checks that every
# __global__ of runtime/cuda/ ran under them and that what the emulation forbids does not
# compile (tests/runtime/emu_check.sh).
# every .cu but device.cu (the CUDA device: the CUDA runtime's API, not kernels)
EMU_CU       := $(filter-out runtime/cuda/device.cu,$(wildcard runtime/cuda/*.cu))
EMU_OBJ      := $(BUILD)/emu/emu.o $(patsubst runtime/cuda/%.cu,$(BUILD)/emu/%.o,$(EMU_CU))
# UBSan's C++-only checks (function, vptr) need the C++ runtime, which the C tests do not link.
EMU_NOSAN    := -fno-sanitize=function,vptr
EMU_CXXFLAGS := -x c++ -std=c++17 -Wall -Wextra -Werror -ffp-contract=off -fno-exceptions \
                -fno-rtti -D_GNU_SOURCE -Iruntime -MMD -MP
EMU_TEST_BIN := $(patsubst tests/runtime/%.c,$(BUILD)/rtests/%,$(EMU_TEST_SRC))
$(BUILD)/emu/%.o: runtime/cuda/%.cu
	@mkdir -p $(@D)
	$(CC) $(EMU_CXXFLAGS) $(CFLAGS) $(if $(findstring clang,$(CC)),$(EMU_NOSAN)) -c $< -o $@
$(BUILD)/emu/emu.o: runtime/emu/emu.c
	@mkdir -p $(@D)
	$(CC) $(RT_CFLAGS) $(CFLAGS) -c $< -o $@
$(BUILD)/emu/emu_fixtures.o: tests/runtime/emu_fixtures.cu
	@mkdir -p $(@D)
	$(CC) $(EMU_CXXFLAGS) $(CFLAGS) $(if $(findstring clang,$(CC)),$(EMU_NOSAN)) -c $< -o $@
$(BUILD)/libampcemu.a: $(EMU_OBJ)
	rm -f $@
	ar rcs $@ $^
# test_gpucost_emu checks the cost model's kernel descriptions (ir/gpu_kernels.c) against them.
$(EMU_TEST_BIN): $(BUILD)/rtests/%: tests/runtime/%.c tests/runtime/emu_test.h $(BUILD)/libampcemu.a \
                 $(BUILD)/libampcrt.a $(BUILD)/emu/emu_fixtures.o $(BUILD)/obj/ir/gpu_kernels.o
	@mkdir -p $(@D)
	$(CC) $(RT_CFLAGS) $(CFLAGS) $(if $(findstring gpucost,$*),-Iir -I$(BUILD)/gen) -o $@ $< \
	    $(if $(findstring checker,$*),$(BUILD)/emu/emu_fixtures.o) \
	    $(if $(findstring gpucost,$*),$(BUILD)/obj/ir/gpu_kernels.o) \
	    $(BUILD)/libampcemu.a $(BUILD)/libampcrt.a $(LDFLAGS) -lcmocka $(RT_LIBS)

.PHONY: emu-check
emu-check: $(EMU_TEST_BIN)
	@rm -f $(BUILD)/emu/kernels.log
	@set -e; for t in $(EMU_TEST_BIN); do echo "== $$t"; \
	    AMPC_EMU_KERNEL_LOG=$(BUILD)/emu/kernels.log $$t; done
	tests/runtime/emu_check.sh "$(CC)" $(BUILD)/emu/kernels.log
unit: emu-check

# The fixtures under nvcc too (in cuda-check): kernel_api.cuh means the same to both compilers.
$(BUILD)/emu/nvcc_fixtures.o: tests/runtime/emu_fixtures.cu $(CUDA_DEPS)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
.PHONY: emu-nvcc-check
emu-nvcc-check:
	@if [ -n "$(NVCC)" ]; then $(MAKE) --no-print-directory $(BUILD)/emu/nvcc_fixtures.o && \
	    echo "emu-nvcc-check: the emulator's fixtures (cuda/kernel_api.cuh) compile with nvcc"; \
	else echo "SKIPPED: emu-nvcc-check (the emulator's fixtures under nvcc): no nvcc"; fi
cuda-check: emu-nvcc-check
# The checks whose recipes run a make of their own link programs against the
# runtime library: this make builds it first, so that under -j a sub-make never
# archives it again while this one links against it (after a commit, version.h
# changes and build_info.o with it).
cuda-check nccl-check nccl-mpi-check gpu-check-build: $(BUILD)/libampcrt.a
-include $(wildcard $(BUILD)/emu/*.d)

golden: $(BUILD)/ampc
	tests/golden/run.sh $(BUILD)/ampc
	tests/opsdoc.sh $(BUILD)/ampc

# docs/ops.md is generated from the op table (compiler/opref.c; tests/opsdoc.sh)
ops-doc: $(BUILD)/ampc
	$(BUILD)/ampc --describe-op=all > docs/ops.md

# Generated graphs as CI artifacts (docs/ci.md): the naming rule pinned, JSON
# documents order-independent and valid against their closed schemas
# (python3-jsonschema), ampc diff, and examples/ci/ci.sh on today's models and
# on planted regressions.
ci-check: $(BUILD)/ampc
	tests/ci/run.sh $(BUILD)/ampc

roundtrip: $(BUILD)/ampc
	tests/roundtrip.sh $(BUILD)/ampc

# The whole suite again with AddressSanitizer and UndefinedBehaviorSanitizer.
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
asan-check:
	$(MAKE) BUILD=build/asan CC=clang CFLAGS="$(ASAN_FLAGS)" LDFLAGS="$(ASAN_FLAGS)" \
	    CUDA_LIBS_SMOKE=0 unit golden roundtrip

FUZZ_FLAGS := -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
# The targets: fuzz_frontend (front end and passes) and fuzz_emit_c (the C
# backend: the emitted C must be well-formed whatever the names hold).
FUZZ_TARGET ?= fuzz_frontend
# fuzz-check's fixed run of fuzz_emit_c: every input runs all passes and the
# backend, so fewer runs keep it to a few tens of seconds.
EMIT_FUZZ_RUNS ?= 4000
# fuzz_mxnet_json's: each input is imported twice and compiled through every pass
MXJSON_FUZZ_RUNS ?= 4000
# fuzz_rec_options's: one string parse per input (a few seconds)
REC_OPTIONS_FUZZ_RUNS ?= 100000
# fuzz_plancache's: one parse, two serializations per input (a few seconds)
PLANCACHE_FUZZ_RUNS ?= 100000
# fuzz_machine's: each machine file accepted is placed twice (one and two machines)
MACHINE_FUZZ_RUNS ?= 20000
# FORCE: the sub-make decides what to rebuild, so fixes in ir/, passes/ and
# grammar/ reach the fuzzer.  One rule builds the library for both targets,
# so under -j two sub-makes never write the same objects at once.
fuzzlib: FORCE
	$(MAKE) BUILD=build/fuzzlib CC=clang CFLAGS="-O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all" build/fuzzlib/libampc.a

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h fuzzlib
	@mkdir -p $(@D)
	clang $(AMPC_CFLAGS) -Ibuild/fuzzlib/gen $(FUZZ_FLAGS) -o $@ $< build/fuzzlib/libampc.a $(JSON_LIBS) -lm

# Replays the corpus, then a deterministic fuzzing pass (fixed seed and run
# count), for each target.
fuzz-check: $(BUILD)/fuzz/fuzz_frontend $(BUILD)/fuzz/fuzz_emit_c $(BUILD)/ampc \
            $(BUILD)/fuzz/fuzz_mxparams $(BUILD)/fuzz/fuzz_npy $(BUILD)/fuzz/fuzz_mxnet_json \
            $(BUILD)/fuzz/fuzz_recordio $(BUILD)/fuzz/fuzz_rec_options $(BUILD)/fuzz/fuzz_plancache \
            $(BUILD)/fuzz/fuzz_machine
	AMPC=$(BUILD)/ampc tests/fuzz/run.sh $(BUILD)/fuzz/fuzz_frontend check
	AMPC=$(BUILD)/ampc FUZZ_RUNS=$(EMIT_FUZZ_RUNS) tests/fuzz/run.sh $(BUILD)/fuzz/fuzz_emit_c check
	tests/fuzz/run.sh $(BUILD)/fuzz/fuzz_mxparams check
	tests/fuzz/run.sh $(BUILD)/fuzz/fuzz_npy check
	tests/fuzz/run.sh $(BUILD)/fuzz/fuzz_recordio check
	FUZZ_RUNS=$(PLANCACHE_FUZZ_RUNS) tests/fuzz/run.sh $(BUILD)/fuzz/fuzz_plancache check
	FUZZ_RUNS=$(REC_OPTIONS_FUZZ_RUNS) tests/fuzz/run.sh $(BUILD)/fuzz/fuzz_rec_options check
	FUZZ_RUNS=$(MXJSON_FUZZ_RUNS) tests/fuzz/run.sh $(BUILD)/fuzz/fuzz_mxnet_json check
	FUZZ_RUNS=$(MACHINE_FUZZ_RUNS) tests/fuzz/run.sh $(BUILD)/fuzz/fuzz_machine check

# The training program's file readers (--load-params, --predict): each
# target is its reader's source built with the fuzzer (no library).
RT_FUZZ_CFLAGS := -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iruntime $(FUZZ_FLAGS)
$(BUILD)/fuzz/fuzz_mxparams: tests/fuzz/fuzz_mxparams.c runtime/mxparams.c runtime/mxparams.h runtime/fileio.c
	@mkdir -p $(@D)
	clang $(RT_FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_mxparams.c runtime/mxparams.c runtime/fileio.c -lz
$(BUILD)/fuzz/fuzz_npy: tests/fuzz/fuzz_npy.c runtime/npy.c runtime/npy.h runtime/fileio.c
	@mkdir -p $(@D)
	clang $(RT_FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_npy.c runtime/npy.c runtime/fileio.c -lz
$(BUILD)/fuzz/fuzz_recordio: tests/fuzz/fuzz_recordio.c runtime/data/recordio.c runtime/data/recordio.h
	@mkdir -p $(@D)
	clang $(RT_FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_recordio.c runtime/data/recordio.c
# the cuDNN plan cache file (--cudnn-plan-cache; runtime/cuda/tune.c, CUDA-free)
$(BUILD)/fuzz/fuzz_plancache: tests/fuzz/fuzz_plancache.c runtime/cuda/tune.c runtime/cuda/tune.h \
                              runtime/cuda/plan.c runtime/rt.c runtime/fileio.c
	@mkdir -p $(@D)
	clang $(RT_FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_plancache.c runtime/cuda/tune.c \
	    runtime/cuda/plan.c runtime/rt.c runtime/fileio.c -lm
# the recordio(...) option string: the data-source parser and the options' setter
# (settings.c's defaults name the data directory: build_info.c holds it)
$(BUILD)/fuzz/fuzz_rec_options: tests/fuzz/fuzz_rec_options.c runtime/settings.c runtime/settings.h \
                                runtime/data/recordio.c runtime/data/recordio.h \
                                runtime/build_info.c $(BUILD)/gen/version.h
	@mkdir -p $(@D)
	clang $(RT_FUZZ_CFLAGS) -I$(BUILD)/gen -o $@ tests/fuzz/fuzz_rec_options.c runtime/settings.c \
	    runtime/build_info.c runtime/data/recordio.c -lm

# make fuzz [FUZZ_TARGET=fuzz_emit_c] [FUZZ_SECONDS=N]
fuzz: $(BUILD)/fuzz/$(FUZZ_TARGET) $(BUILD)/ampc
	AMPC=$(BUILD)/ampc tests/fuzz/run.sh $(BUILD)/fuzz/$(FUZZ_TARGET) $(FUZZ_SECONDS)
FORCE:

# Compiled programs, end to end (tests/e2e/run.sh says what).
$(BUILD)/e2e/refcheck: tests/e2e/refcheck.c $(BUILD)/libampc.a $(BUILD)/libampcrt.a
	@mkdir -p $(@D)
	$(CC) $(AMPC_CFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libampc.a $(BUILD)/libampcrt.a $(LDFLAGS) $(RT_LIBS)

# RecordIO (docs/training.md): tools/im2rec, and the test helper that
# writes images with libpng/libjpeg-turbo and reads them through the source.
$(BUILD)/im2rec: tools/im2rec.c runtime/fileio.c runtime/fileio.h
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(RT_CFLAGS) $(CFLAGS) -o $@ tools/im2rec.c runtime/fileio.c $(LDFLAGS)
$(BUILD)/rio_tool: tests/recordio/rio_tool.c $(BUILD)/libampcrt.a
	@mkdir -p $(@D)
	$(CC) $(RT_CFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libampcrt.a $(LDFLAGS) -lpng -lturbojpeg $(RT_LIBS)

$(BUILD)/e2e/statcmp: tests/e2e/statcmp.c
	@mkdir -p $(@D)
	$(CC) $(AMPC_CFLAGS) $(CFLAGS) -o $@ $< $(LDFLAGS) -lm

e2e: $(BUILD)/ampc $(BUILD)/libampcrt.a $(BUILD)/e2e/refcheck $(BUILD)/e2e/statcmp $(DATA_DIR)/digits.csv.gz \
     $(BUILD)/im2rec $(BUILD)/rio_tool cuda
	tests/e2e/run.sh $(BUILD)/ampc $(BUILD)/e2e/refcheck $(BUILD)/e2e/statcmp $(DATA_DIR)
	tests/e2e/training.sh $(BUILD)/ampc $(DATA_DIR)
	tests/e2e/device_loop.sh $(BUILD)/ampc $(DATA_DIR)
	tests/e2e/cuda_graph.sh $(BUILD)/ampc $(DATA_DIR)
	tests/e2e/hostile_run.sh $(BUILD)/ampc $(DATA_DIR)
	tests/e2e/fashion.sh $(BUILD)/ampc $(DATA_DIR)
	tests/recordio/run.sh $(BUILD) $(DATA_DIR)
	tests/recordio/hostile.sh $(BUILD)
	tests/e2e/hostile_compile.sh $(BUILD)/ampc
	@$(MAKE) --no-print-directory gpu-check-dry
	tests/e2e/fuse.sh $(BUILD)/ampc
	tests/e2e/memplan.sh $(BUILD)/ampc
	tests/e2e/cuda_plan_cpu.sh $(BUILD)/ampc $(BUILD)/e2e/statcmp
	tests/e2e/conv_bn_stats.sh $(BUILD)/ampc $(BUILD)/e2e/statcmp
	tests/e2e/predict.sh $(BUILD)/ampc $(DATA_DIR)
	tests/e2e/threads.sh $(BUILD)/ampc
	tests/e2e/mpi.sh $(BUILD)/ampc $(DATA_DIR)
	tests/e2e/mpi_check.sh $(BUILD)/ampc $(DATA_DIR)
	tests/e2e/cuda_build.sh $(BUILD)/ampc
	tests/e2e/gpucost.sh $(BUILD)/ampc
	tests/e2e/deps.sh
	python3 tests/e2e/docs_commands.py $(BUILD)
	tests/e2e/newcomer.sh $(BUILD)

# MXNet interoperability, checked against MXNet 1.9.1 itself (tests/mxnet/,
# docs/mxnet.md).  make mxnet-env makes its Python environment from the
# hash-pinned tests/mxnet/requirements.txt (CI does; elsewhere the tests
# print SKIPPED without it, unless AMPC_REQUIRE_MXNET=1).
MXNET_ENV ?= $(CURDIR)/build/mxnet-env
export MXNET_ENV
mxnet-env: $(MXNET_ENV)/.installed
$(MXNET_ENV)/.installed: tests/mxnet/requirements.txt
	rm -rf $(MXNET_ENV)
	python3 -m venv $(MXNET_ENV)
	$(MXNET_ENV)/bin/python -m pip install --no-input --disable-pip-version-check --require-hashes \
	    --no-deps --only-binary=:all: -r tests/mxnet/requirements.txt
	$(MXNET_ENV)/bin/python -c 'import mxnet, numpy; assert (mxnet.__version__, numpy.__version__) == ("1.9.1", "1.23.5")'
	touch $@

mxnet-check: $(BUILD)/ampc $(BUILD)/libampcrt.a $(BUILD)/im2rec $(BUILD)/rio_tool
	tests/mxnet/params.sh $(BUILD)/ampc
	tests/mxnet/import.sh $(BUILD)/ampc
	tests/recordio/mxnet.sh $(BUILD)

valgrind-check: $(BUILD)/ampc
	tests/valgrind.sh $(BUILD)/ampc

# The steps run in this order (each may build in parallel with -j).
check:
	@$(MAKE) --no-print-directory deps-test
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory golden
	@$(MAKE) --no-print-directory roundtrip
	@$(MAKE) --no-print-directory ci-check
	@$(MAKE) --no-print-directory e2e
	@$(MAKE) --no-print-directory mxnet-check
	@$(MAKE) --no-print-directory valgrind-check
	@$(MAKE) --no-print-directory asan-check
	@$(MAKE) --no-print-directory fuzz-check
	@echo "make check: all tests passed"

# ---- the main job, benchmarks, install --------------------------------------
# The report of the reference network, then a real run: digits_cnn compiled
# with AMP (fp16, dynamic loss scaling) for the CPU and trained on digits.
# deps first, on its own: under -j the compiler must not start before gcc is there.
# The build runs in parallel (-j, one job per core) unless a -j was given
# (MAKEFLAGS holds it).  Each run saves into a directory of its own: a
# program refuses a --save-dir that holds another run's checkpoints.
NPROC := $(shell nproc 2>/dev/null || echo 2)
demo:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC)) data $(BUILD)/ampc
	$(BUILD)/ampc examples/resnet50_v1d.sym --report
	@mkdir -p $(BUILD)/demo
	$(BUILD)/ampc examples/digits_cnn.sym --amp=float16 -o $(BUILD)/demo/digits_cnn
	@ck=$$(mktemp -d $(BUILD)/demo/checkpoints-XXXXXX) && set -x && \
	    AMPC_DATA_DIR=$(DATA_DIR) $(BUILD)/demo/digits_cnn --data digits --epochs 6 --log-interval 15 \
	        --save-dir $$ck

bench: $(BUILD)/ampc
	bench/compile_time.sh $(BUILD)/ampc
	bench/diff.sh $(BUILD)/ampc

deps:
	@tools/deps.sh tools/deps.txt

# the tests' packages too (tools/deps-test.txt): make check and .ci/run
deps-test:
	@tools/deps.sh tools/deps.txt tools/deps-test.txt

# The digits data set (1,797 8x8 images) ships in Debian's python3-sklearn;
# fetched at build time, never committed.
data: $(DATA_DIR)/digits.csv.gz
$(DATA_DIR)/digits.csv.gz:
	$(call quiet,FETCH,$@)tools/fetch_digits.sh $(DATA_DIR)

# Fashion-MNIST (IDX files) from Debian's dataset-fashion-mnist (make
# deps-test installs it) into DATA_DIR/fashion-mnist, where --data fashion_mnist looks
# first; never committed.
fashion: $(DATA_DIR)/fashion-mnist/train-images-idx3-ubyte.gz
$(DATA_DIR)/fashion-mnist/train-images-idx3-ubyte.gz:
	tools/fetch_fashion.sh $(DATA_DIR)/fashion-mnist

# ampc finds its runtime relative to itself: PREFIX/include/ampc and
# PREFIX/lib/ampc (codegen/build.c), so an installed ampc works anywhere.
# The data (digits, and Fashion-MNIST when make fashion fetched it) goes to
# PREFIX/share/ampc/data, and the installed runtime's default data directory
# is that one: its build_info.o is compiled again with it (the build tree's
# build/data is gone once the checkout is).  im2rec goes beside ampc.
INSTALL_DATA_DIR = $(PREFIX)/share/ampc/data
$(BUILD)/install/libampcrt.a: $(BUILD)/libampcrt.a runtime/build_info.c $(BUILD)/gen/version.h FORCE
	@mkdir -p $(@D)
	$(call quiet,CC,runtime/build_info.c for $(INSTALL_DATA_DIR))$(CC) $(RT_CFLAGS) $(CFLAGS) \
	    -I$(BUILD)/gen -DAMPC_DEFAULT_DATA_DIR='"$(INSTALL_DATA_DIR)"' -c runtime/build_info.c \
	    -o $(@D)/build_info.o
	$(call quiet,AR,$@)cp $(BUILD)/libampcrt.a $@.tmp && ar rcs $@.tmp $(@D)/build_info.o && mv -f $@.tmp $@

install: $(BUILD)/ampc $(BUILD)/install/libampcrt.a $(BUILD)/im2rec data cuda
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/ampc \
	    $(DESTDIR)$(PREFIX)/include/ampc/kernels $(DESTDIR)$(INSTALL_DATA_DIR)
	install -m 755 $(BUILD)/ampc $(DESTDIR)$(PREFIX)/bin/ampc
	install -m 755 $(BUILD)/im2rec $(DESTDIR)$(PREFIX)/bin/im2rec
	install -m 644 $(BUILD)/install/libampcrt.a $(DESTDIR)$(PREFIX)/lib/ampc/libampcrt.a
	install -m 644 $(DATA_DIR)/digits.csv.gz $(DESTDIR)$(INSTALL_DATA_DIR)/digits.csv.gz
	if [ -d $(DATA_DIR)/fashion-mnist ]; then install -d $(DESTDIR)$(INSTALL_DATA_DIR)/fashion-mnist && \
	    install -m 644 $(DATA_DIR)/fashion-mnist/* $(DESTDIR)$(INSTALL_DATA_DIR)/fashion-mnist/; fi
	$(if $(MPI_OBJ),install -m 644 $(MPI_OBJ) $(DESTDIR)$(PREFIX)/lib/ampc/ampcmpi.o)
	install -m 644 runtime/*.h $(DESTDIR)$(PREFIX)/include/ampc/
	install -m 644 runtime/kernels/*.h $(DESTDIR)$(PREFIX)/include/ampc/kernels/
	@# a GPU program (ampc --target=cuda) includes runtime/cuda/'s headers and links libampccuda.a
	if [ -f $(BUILD)/libampccuda.a ]; then install -d $(DESTDIR)$(PREFIX)/include/ampc/cuda && \
	    install -m 644 $(BUILD)/libampccuda.a $(DESTDIR)$(PREFIX)/lib/ampc/libampccuda.a && \
	    install -m 644 runtime/cuda/*.h $(DESTDIR)$(PREFIX)/include/ampc/cuda/; fi

format:
	clang-format -i $(LIB_SRC) compiler/main.c $(UNIT_SRC) tests/fuzz/*.c

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj $(BUILD)/tests $(BUILD)/rtests -name '*.d' 2>/dev/null)
