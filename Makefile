# kgym: the one entry point. `make run` starts the env server, `make test` runs every suite that
# needs no GPU, `make test-gpu` those that do, `make bench` the benchmarks. See README.md.
.DEFAULT_GOAL := all
SHELL := /bin/bash

BUILD   ?= build
CC      ?= cc
# `make WERROR=` on compilers newer than CI's gcc 12 that bring new warnings
WERROR  ?= -Werror
HOST    ?= 127.0.0.1
PORT    ?= 8080
STATE   ?= state
SERVE_ARGS ?=

PKGS     := libmicrohttpd jansson libpcre2-8
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra $(WERROR) -Wshadow -Wformat=2 -Wno-format-nonliteral
CPPFLAGS := -Ienv -I. $(PKG_CFLAGS)
CFLAGS   ?= -O2 -g
LDLIBS   := $(PKG_LIBS) -lpthread -lseccomp -lcap -lcrypto -lutf8proc -lm -fopenmp
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

# The env server's library: every env/ source but the CLI entry point.
ENV_SRCS := $(sort $(filter-out env/main.c,$(wildcard env/*.c env/util/*.c env/tools/*.c env/sandbox/*.c env/harness/*.c)))
ENV_OBJS := $(ENV_SRCS:%.c=$(BUILD)/obj/%.o)
SAN_OBJS := $(ENV_SRCS:%.c=$(BUILD)/san/%.o)
UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
UNIT_SAN_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/san/tests/%)

# kgym-bench (env/bench/): its own CLI over the same library, plus libcurl.
BENCH_SRCS := $(sort $(filter-out env/bench/main.c,$(wildcard env/bench/*.c)))
BENCH_OBJS := $(BENCH_SRCS:%.c=$(BUILD)/obj/%.o)
BENCH_SAN_OBJS := $(BENCH_SRCS:%.c=$(BUILD)/san/%.o)
KGYM_BENCH := $(BUILD)/kgym-bench

# The policy (policy/): model formats, tokenizer, chat templates, the CPU reference; its CLI
# is policy/cli/. OpenMP for the CPU reference's loops.
POLICY_SRCS := $(sort $(wildcard policy/*.c))
POLICY_OBJS := $(POLICY_SRCS:%.c=$(BUILD)/obj/%.o)
POLICY_SAN_OBJS := $(POLICY_SRCS:%.c=$(BUILD)/san/%.o)
POLICY_CLI_SRCS := $(sort $(wildcard policy/cli/*.c))
KGYM_POLICY := $(BUILD)/kgym-policy
$(POLICY_OBJS) $(POLICY_SAN_OBJS) $(POLICY_CLI_SRCS:%.c=$(BUILD)/obj/%.o): CFLAGS += -fopenmp
$(POLICY_SAN_OBJS): SANFLAGS_EXTRA := -fopenmp
# Fuzz targets (clang's libFuzzer): tests/fuzz/fuzz_*.c over the policy's parsers.
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_LIB_SRCS := $(POLICY_SRCS) env/util/strbuf.c env/util/fileio.c env/util/text.c

KGYM_ENV := $(BUILD)/kgym-env
# The sandbox launcher: its own small program (env/launcher/), sharing the profile code.
LAUNCHER_SRCS := $(wildcard env/launcher/*.c) env/sandbox/profile.c env/sandbox/seccomp.c \
                 env/util/strbuf.c env/util/fileio.c
KGYM_SANDBOX := $(BUILD)/kgym-sandbox

.PHONY: all run test test-gpu bench bench-policy clean deps venv unit unit-san format help fuzz kernels
all: $(KGYM_ENV) $(KGYM_SANDBOX) $(KGYM_BENCH) $(KGYM_POLICY)

help:
	@echo "make            build $(KGYM_ENV), $(KGYM_BENCH), $(KGYM_POLICY), $(KGYM_SANDBOX)"
	@echo "make run        install what is missing, build, serve the bundled tasks on $(HOST):$(PORT)"
	@echo "make test       every suite that needs no GPU (unit, ASan+UBSan, api, tasks, sandbox, harness,"
	@echo "                kgym-bench, policy, fuzz)"
	@echo "make fuzz       build the libFuzzer targets (mk/fuzz.sh runs them)"
	@echo "make test-gpu   the GPU suites (on a machine with an NVIDIA GPU)"
	@echo "make bench      the benchmarks of tests/bench/ (figures go to README.md)"
	@echo "make kernels    the CUDA kernels, their checks, the GPU policy checks, $(BUILD)/kgym-policy-cuda (nvcc)"
	@echo "make bench-policy  kgym-policy-cuda bench beside PyTorch on this machine's GPU (issue 8)"
	@echo "make clean      remove $(BUILD)/"
	@echo "variables: PORT, HOST, STATE (state dir), SERVE_ARGS, WERROR (empty to allow warnings), KGYM_VENV"

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/san/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(CPPFLAGS) -O1 -g $(SAN) $(SANFLAGS_EXTRA) -MMD -MP -c $< -o $@

$(KGYM_ENV): $(BUILD)/obj/env/main.o $(ENV_OBJS)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(KGYM_BENCH): $(BUILD)/obj/env/bench/main.o $(BENCH_OBJS) $(ENV_OBJS)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) -lcurl

$(KGYM_POLICY): $(POLICY_CLI_SRCS:%.c=$(BUILD)/obj/%.o) $(POLICY_OBJS) $(filter $(BUILD)/obj/env/util/%,$(ENV_OBJS))
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The policy suite's checker (tests/policy/policy_check.c): dumps what the pytest tests compare
# against HF transformers and PyTorch (gradients, optimizer steps) as safetensors/JSON.
POLICY_CHECK := $(BUILD)/tests/policy-check
$(POLICY_CHECK): $(BUILD)/obj/tests/policy/policy_check.o $(POLICY_OBJS) $(filter $(BUILD)/obj/env/util/%,$(ENV_OBJS))
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/obj/tests/policy/policy_check.o: CFLAGS += -fopenmp

$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB_SRCS)
	@mkdir -p $(@D)
	clang $(CSTD) $(CPPFLAGS) -O1 -g -fsanitize=fuzzer,address,undefined -o $@ $^ \
	    $(PKG_LIBS) -lutf8proc -lm

$(KGYM_SANDBOX): $(LAUNCHER_SRCS:%.c=$(BUILD)/obj/%.o)
	$(CC) $(CFLAGS) -o $@ $^ -lseccomp -lcap

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(ENV_OBJS) $(BENCH_OBJS) $(POLICY_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) -lcurl -lcmocka

$(BUILD)/san/tests/%: $(BUILD)/san/tests/unit/%.o $(SAN_OBJS) $(BENCH_SAN_OBJS) $(POLICY_SAN_OBJS)
	@mkdir -p $(@D)
	$(CC) -g $(SAN) -o $@ $^ $(LDLIBS) -lcurl -lcmocka

deps:
	@mk/deps.sh

venv: deps
	@mk/venv.sh

unit: $(UNIT_BINS)
	@mk/run-unit.sh $(UNIT_BINS)

unit-san: $(UNIT_SAN_BINS)
	@mk/run-unit.sh $(UNIT_SAN_BINS)

run: deps
	@$(MAKE) --no-print-directory all
	$(KGYM_ENV) serve --host $(HOST) --port $(PORT) --state-dir $(STATE) --config configs/server.json \
	    --sandbox-python "$$(mk/venv.sh)/bin/python" $(SERVE_ARGS)

test: deps
	@$(MAKE) --no-print-directory all $(UNIT_BINS) $(UNIT_SAN_BINS) $(FUZZ_BINS) $(POLICY_CHECK)
	@mk/test.sh

fuzz: $(FUZZ_BINS)

# The policy's CUDA kernels (kernels/*.cu) and their checks and benches (tests/kernels,
# tests/bench/kernels): built by nvcc for the GPU they will run on (KG_CUDA_ARCH; H100/H200 by
# default). Not part of `make test`: CI has no GPU (and need not have nvcc).
NVCC         ?= nvcc
KG_CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a
NVCCFLAGS    ?= -std=c++17 -O3 -lineinfo $(KG_CUDA_ARCH) -Xcompiler -Wall,-Wextra -Werror all-warnings
KERNEL_OBJS  := $(patsubst kernels/%.cu,$(BUILD)/kernels/obj/%.o,$(wildcard kernels/*.cu))
KERNEL_BINS  := $(patsubst tests/kernels/%.cu,$(BUILD)/kernels/%,$(wildcard tests/kernels/test_*.cu)) \
                $(patsubst tests/bench/kernels/%.cu,$(BUILD)/kernels/%,$(wildcard tests/bench/kernels/bench_*.cu))

$(BUILD)/kernels/obj/%.o: kernels/%.cu kernels/kernels.h $(wildcard kernels/*.cuh)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -I. -c $< -o $@

$(BUILD)/kernels/test_%: tests/kernels/test_%.cu tests/kernels/kcheck.h $(KERNEL_OBJS)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -I. -Itests/kernels -o $@ $< $(KERNEL_OBJS) -lcublasLt -lcublas

$(BUILD)/kernels/bench_%: tests/bench/kernels/bench_%.cu tests/kernels/kcheck.h $(KERNEL_OBJS)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -I. -Itests/kernels -o $@ $< $(KERNEL_OBJS) -lcublasLt -lcublas

# The policy on the GPU (policy/cuda/*.c): C11 host code over the kernels, with the CPU policy
# beside it; its checks are tests/kernels/ctest_*.c. nvcc links them (it brings cudart).
CUDA_INC        ?= -I$(dir $(shell command -v $(NVCC) 2>/dev/null))../include
POLICY_GPU_SRCS := $(sort $(wildcard policy/cuda/*.c))
POLICY_GPU_OBJS := $(POLICY_GPU_SRCS:%.c=$(BUILD)/obj/%.o)
GPU_CTESTS      := $(patsubst tests/kernels/%.c,$(BUILD)/kernels/%,$(wildcard tests/kernels/ctest_*.c))
GPU_LINK_LIBS   := -lcublasLt -lcublas -lgomp $(filter-out -fopenmp,$(LDLIBS))
$(POLICY_GPU_OBJS) $(GPU_CTESTS:$(BUILD)/kernels/%=$(BUILD)/obj/tests/kernels/%.o): CPPFLAGS += $(CUDA_INC)
$(POLICY_GPU_OBJS) $(GPU_CTESTS:$(BUILD)/kernels/%=$(BUILD)/obj/tests/kernels/%.o): CFLAGS += -fopenmp

$(BUILD)/kernels/ctest_%: $(BUILD)/obj/tests/kernels/ctest_%.o $(POLICY_GPU_OBJS) $(KERNEL_OBJS) $(POLICY_OBJS) $(filter $(BUILD)/obj/env/util/%,$(ENV_OBJS))
	@mkdir -p $(@D)
	$(NVCC) $(KG_CUDA_ARCH) -o $@ $^ $(GPU_LINK_LIBS)

# The GPU policy against HF transformers (`make test-gpu`'s gpu-policy-hf suite): a checker that
# tests/gpu/test_policy_gpu.py drives, over the same objects as the model checks.
POLICY_GPU_CHECK := $(BUILD)/tests/policy-gpu-check
$(BUILD)/obj/tests/gpu/policy_gpu_check.o: CPPFLAGS += $(CUDA_INC)
$(POLICY_GPU_CHECK): $(BUILD)/obj/tests/gpu/policy_gpu_check.o $(POLICY_GPU_OBJS) $(KERNEL_OBJS) $(POLICY_OBJS) $(filter $(BUILD)/obj/env/util/%,$(ENV_OBJS))
	@mkdir -p $(@D)
	$(NVCC) $(KG_CUDA_ARCH) -o $@ $^ $(GPU_LINK_LIBS)

# kgym-policy-cuda: the same CLI compiled with KGYM_WITH_CUDA (--device cuda|cpu|auto, the GPU
# model and decoder behind it). Its CLI objects live apart from the CPU build's; nvcc links it.
KGYM_POLICY_CUDA     := $(BUILD)/kgym-policy-cuda
POLICY_CLI_CUDA_OBJS := $(POLICY_CLI_SRCS:%.c=$(BUILD)/obj-cuda/%.o)
$(POLICY_CLI_CUDA_OBJS): CPPFLAGS += $(CUDA_INC) -DKGYM_WITH_CUDA
$(POLICY_CLI_CUDA_OBJS): CFLAGS += -fopenmp

$(BUILD)/obj-cuda/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(KGYM_POLICY_CUDA): $(POLICY_CLI_CUDA_OBJS) $(POLICY_GPU_OBJS) $(KERNEL_OBJS) $(POLICY_OBJS) $(filter $(BUILD)/obj/env/util/%,$(ENV_OBJS))
	@mkdir -p $(@D)
	$(NVCC) $(KG_CUDA_ARCH) -o $@ $^ $(GPU_LINK_LIBS)

-include $(wildcard $(BUILD)/obj-cuda/policy/cli/*.d)

kernels: $(KERNEL_BINS) $(GPU_CTESTS) $(POLICY_GPU_CHECK) $(KGYM_POLICY_CUDA)

# the objects are shared by every test and bench: never deleted as intermediates
.SECONDARY: $(KERNEL_OBJS)

# The GPU suites need only the machine's torch so far (GPU machines have no package registry).
test-gpu:
	@mk/test-gpu.sh

bench: deps
	@$(MAKE) --no-print-directory all
	@mk/bench.sh

# issue 8's side-by-side: kgym-policy-cuda bench and PyTorch (HF transformers) on the same GPU
bench-policy: kernels
	@tests/bench/policy/run.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD)

# header dependencies of every object (-MMD): a changed header rebuilds what includes it
-include $(wildcard $(BUILD)/obj/*.d $(BUILD)/obj/*/*.d $(BUILD)/obj/*/*/*.d $(BUILD)/obj/*/*/*/*.d \
                    $(BUILD)/san/*/*.d $(BUILD)/san/*/*/*.d $(BUILD)/san/*/*/*/*.d)
