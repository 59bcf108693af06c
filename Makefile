# Selene: everything builds and tests from here.
#
#   make                 libselene.a, libselene.so, the selene program
#   make test            build and run every CMocka test binary
#   make check-asan      the same tests under ASan and UBSan (build-asan/)
#   make check-tsan      the thread-heavy tests and 3 ranks under TSan (build-tsan/)
#   make test-python     the Python binding's tests and the PyTorch engine's CPU proof
#   make install         PREFIX=/usr/local DESTDIR=
#   make deps            install every missing Debian package (scripts/install-deps)
#   V=1                  show every command

PREFIX ?= /usr/local
DESTDIR ?=
BUILD ?= build
SANITIZE ?=

CC ?= cc
PKG_CONFIG ?= pkg-config
PKGS := liburing libxxhash libb2

# The version is include/selene/selene.h's; its major is the SONAME's.
version_part = $(shell sed -n 's/^\#define SELENE_VERSION_$(1) \([0-9]*\)$$/\1/p' \
		include/selene/selene.h)
SONAME_MAJOR := $(call version_part,MAJOR)
VERSION := $(SONAME_MAJOR).$(call version_part,MINOR).$(call version_part,PATCH)

# CFLAGS and LDFLAGS are the user's (optimisation, debug); the rest is ours
# and survives a CFLAGS given on the command line.
CFLAGS ?= -O2 -g
WERROR ?= -Werror
SEL_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra $(WERROR) -Wstrict-prototypes \
	-Wshadow -Wvla -fPIC -MMD -MP -I. -Iinclude \
	$(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
SEL_LDFLAGS :=

# The CUDA backend needs the toolkit's cuda.h for types only; libcuda.so.1
# is loaded at run time with dlopen.
CUDA_HOME ?= /usr/local/cuda
ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
SEL_CFLAGS += -DSEL_HAVE_CUDA_H -isystem $(CUDA_HOME)/include
endif
# RDMA for pool claims needs libibverbs' infiniband/verbs.h for types only;
# libibverbs.so.1 is loaded at run time with dlopen (pool/rdma.c), so hosts
# without it (the GPU host) build, link and run with claims on TCP.
VERBS_H ?= /usr/include/infiniband/verbs.h
ifneq ($(wildcard $(VERBS_H)),)
$(BUILD)/pool/rdma.o $(BUILD)/tests/test_rdma.o $(BUILD)/tests/test_pool.o \
		$(BUILD)/tests/fake_verbs.o: SEL_CFLAGS += -DSEL_HAVE_VERBS_H
endif
# The selene program's MPI bootstrap and the worker's step channel, where
# Open MPI's headers are.
# Without pkg-config (the GPU host), Open MPI's compiler wrapper says.
MPI_CFLAGS := $(shell $(PKG_CONFIG) --cflags ompi-c 2>/dev/null || mpicc --showme:compile 2>/dev/null)
MPI_LIBS := $(shell $(PKG_CONFIG) --libs ompi-c 2>/dev/null || mpicc --showme:link 2>/dev/null)
ifneq ($(MPI_LIBS),)
$(BUILD)/launch/bootstrap/mpi.o $(BUILD)/launch/worker/step_mpi.o: SEL_CFLAGS += -DSEL_HAVE_MPI $(MPI_CFLAGS)
endif
# Where pkg-config is missing (the GPU host), the libraries' plain names.
PKG_LIBS := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null || echo -luring -lxxhash -lb2)
LDLIBS += $(PKG_LIBS) -lpthread -ldl
TEST_LDLIBS := $(shell $(PKG_CONFIG) --libs cmocka 2>/dev/null || echo -lcmocka)

ifneq ($(SANITIZE),)
SEL_CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
SEL_LDFLAGS += -fsanitize=$(SANITIZE)
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

LIB_SRCS := $(sort \
	cluster/join.c cluster/link.c cluster/protocol.c cluster/resolve.c cluster/summary.c \
	pool/client.c pool/manager.c pool/wire.c \
	common/base.c common/error.c common/failpoint.c common/log.c common/xxh.c \
	coordinator/agreement.c coordinator/api.c coordinator/cluster.c coordinator/fanout.c coordinator/index.c coordinator/metrics.c coordinator/pool.c coordinator/pool_session.c coordinator/store.c coordinator/warm.c \
	record/catalog.c record/dir.c record/disk.c record/file.c record/format.c record/geometry.c \
	record/io.c record/key.c \
	peer/agent.c peer/api.c peer/join.c \
	pool/rdma.c \
	shard/checksum_pool.c shard/config.c shard/device.c shard/device_cuda.c shard/engine.c shard/pool_link.c shard/pool_share.c shard/slab.c shard/warm.c)
PROG_SRCS := $(sort launch/args.c launch/cmd_cluster.c launch/cmd_demo.c launch/cmd_pool.c \
	launch/cmd_records.c \
	launch/main.c launch/scratch.c \
	launch/bench/bench.c launch/bench/fanout.c launch/bench/floor.c launch/bench/pool.c launch/bench/ranks.c \
	launch/bench/restore.c launch/bench/startup.c launch/bench/store.c \
	launch/bootstrap/env.c launch/bootstrap/mpi.c \
	launch/metrics/http.c \
	launch/worker/gpu_cache.c launch/worker/planes.c launch/worker/run.c launch/worker/step_mpi.c \
	launch/worker/synth.c launch/worker/trace.c)
TEST_NAMES := $(sort agreement api args list bootstrap catalog checksum_pool cluster config gpu_cache synth fanout form join link failpoint key geometry format file dir disk cli slab engine engine_stress index pool pool_attach pool_export pool_gpu_export pool_link pool_random pool_share pool_store pool_wire protocol resolve store store_ranks summary metrics_http warm)
# The pool's edges (RDMA, hostile connections), on a line of their own.
TEST_NAMES := $(sort $(TEST_NAMES) pool_client pool_hostile rdma)
TEST_NAMES := $(sort $(TEST_NAMES) device_cuda)

LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
PROG_OBJS := $(PROG_SRCS:%.c=$(BUILD)/%.o)
TEST_BINS := $(TEST_NAMES:%=$(BUILD)/tests/test_%)

STATIC_LIB := $(BUILD)/libselene.a
SHARED_LIB := $(BUILD)/libselene.so.$(VERSION)
PROGRAM := $(BUILD)/selene

all: $(STATIC_LIB) $(SHARED_LIB) $(PROGRAM)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(SEL_CFLAGS) $(CFLAGS) -c $< -o $@

$(STATIC_LIB): $(LIB_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(SHARED_LIB): $(LIB_OBJS) libselene.map
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,libselene.so.$(SONAME_MAJOR) \
		-Wl,--version-script=libselene.map -Wl,-z,defs $(SEL_LDFLAGS) $(LDFLAGS) \
		-o $@ $(LIB_OBJS) $(LDLIBS)
	$(Q)ln -sf libselene.so.$(VERSION) $(BUILD)/libselene.so.$(SONAME_MAJOR)
	$(Q)ln -sf libselene.so.$(VERSION) $(BUILD)/libselene.so

$(PROGRAM): $(PROG_OBJS) $(STATIC_LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(SEL_LDFLAGS) $(LDFLAGS) -o $@ $(PROG_OBJS) $(STATIC_LIB) $(LDLIBS) $(MPI_LIBS)

$(BUILD)/tests/test_%: $(BUILD)/tests/test_%.o $(BUILD)/tests/testutil.o $(STATIC_LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(SEL_LDFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/tests/testutil.o $(STATIC_LIB) \
		$(LDLIBS) $(TEST_LDLIBS)

# The fake verbs device (tests/fake_verbs.c) runs RDMA where no device exists.
$(BUILD)/tests/test_rdma $(BUILD)/tests/test_pool: $(BUILD)/tests/test_%: \
		$(BUILD)/tests/test_%.o $(BUILD)/tests/fake_verbs.o $(BUILD)/tests/testutil.o \
		$(STATIC_LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(SEL_LDFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/tests/fake_verbs.o \
		$(BUILD)/tests/testutil.o $(STATIC_LIB) $(LDLIBS) $(TEST_LDLIBS)

# The cuda backend's test loads a fake driver (tests/fake_cuda.c) as
# libcuda.so.1 through its run path, ahead of any real one; without cuda.h
# the backend is not built and the test skips.
FAKE_CUDA_DIR := $(BUILD)/tests/fake-cuda
ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
$(FAKE_CUDA_DIR)/libcuda.so.1: tests/fake_cuda.c tests/fake_cuda.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE -Wall -Wextra $(WERROR) -fPIC -shared -I. \
		-isystem $(CUDA_HOME)/include -o $@ $<
$(BUILD)/tests/test_device_cuda: $(FAKE_CUDA_DIR)/libcuda.so.1
endif
$(BUILD)/tests/test_device_cuda: \
	TEST_LDLIBS += -Wl,--disable-new-dtags,-rpath,$(abspath $(FAKE_CUDA_DIR))

# The pool instance tests share their manager and instances (tests/pool_fixture.c).
$(BUILD)/tests/test_pool_attach $(BUILD)/tests/test_pool_export \
		$(BUILD)/tests/test_pool_gpu_export: $(BUILD)/tests/test_%: \
		$(BUILD)/tests/test_%.o $(BUILD)/tests/pool_fixture.o $(BUILD)/tests/testutil.o \
		$(STATIC_LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(SEL_LDFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(STATIC_LIB) \
		$(LDLIBS) $(TEST_LDLIBS)

# The launch layer's bootstrap is not in the library.
$(BUILD)/tests/test_bootstrap: $(BUILD)/tests/test_bootstrap.o $(BUILD)/launch/bootstrap/env.o \
		$(BUILD)/launch/bootstrap/mpi.o $(BUILD)/tests/testutil.o $(STATIC_LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(SEL_LDFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(STATIC_LIB) \
		$(LDLIBS) $(MPI_LIBS) $(TEST_LDLIBS)

# The reference worker's modules are the program's, not the library's.
$(BUILD)/tests/test_args: $(BUILD)/launch/args.o
$(BUILD)/tests/test_gpu_cache: $(BUILD)/launch/worker/gpu_cache.o
$(BUILD)/tests/test_synth: $(BUILD)/launch/worker/synth.o $(BUILD)/launch/worker/trace.o
$(BUILD)/tests/test_metrics_http: $(BUILD)/launch/metrics/http.o
$(BUILD)/tests/test_args $(BUILD)/tests/test_gpu_cache $(BUILD)/tests/test_synth \
		$(BUILD)/tests/test_metrics_http: $(BUILD)/tests/test_%: \
		$(BUILD)/tests/test_%.o $(BUILD)/tests/testutil.o $(STATIC_LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(SEL_LDFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(STATIC_LIB) \
		$(LDLIBS) $(TEST_LDLIBS)

$(BUILD)/tests/gpu/test_cuda: $(BUILD)/tests/gpu/test_cuda.o $(BUILD)/tests/testutil.o $(STATIC_LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(SEL_LDFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/tests/testutil.o $(STATIC_LIB) \
		$(LDLIBS) $(TEST_LDLIBS)

tests: $(TEST_BINS) $(PROGRAM)

# Runs every test binary even when one fails, then prints one total line.
test:
	$(Q)scripts/install-deps test metrics
	$(Q)$(MAKE) --no-print-directory tests
	$(Q)SELENE_PROGRAM=$(abspath $(PROGRAM)) tests/run-tests $(TEST_BINS)

# The Python binding's tests (python/tests, Debian's pytest, the host
# device), then the reference PyTorch engine's CPU proof (examples/torch-tp).
PYTHON ?= /usr/bin/python3
test-python:
	$(Q)scripts/install-deps build python
	$(Q)$(MAKE) --no-print-directory all
	$(Q)PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest -q -p no:cacheprovider \
		python/tests examples/torch-tp/test_units.py
	$(Q)if [ -x examples/torch-tp/run-tests ]; then PYTHON=$(PYTHON) SELENE=$(abspath $(PROGRAM)) examples/torch-tp/run-tests; fi

# The cuda backend on a GPU: the round trip, then the copy, store and fetch
# benchmarks. Logs go to $(BUILD)/test-gpu.log and $(BUILD)/bench-gpu.log;
# without a GPU the test skips and says why.
test-gpu:
	$(Q)scripts/install-deps gpu
	$(Q)$(MAKE) --no-print-directory $(BUILD)/tests/gpu/test_cuda $(PROGRAM)
	$(Q)tests/run-tests $(BUILD)/tests/gpu/test_cuda 2>&1 | tee $(BUILD)/test-gpu.log

# libFuzzer targets (clang): the record header decoder, the cluster frame
# and message decoders, the trace parser, the failpoint configuration
# parser, the scan cache decoder, the pool wire protocol and the RDMA
# endpoint decoder. `make fuzz-build` builds them in build-fuzz/; `make
# fuzz` runs each for FUZZ_SECONDS, starting from its corpus in
# tests/fuzz/corpus-NAME (read only: what libFuzzer finds goes to
# build-fuzz/corpus-NAME).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := header frame trace config catalog pool rdma
FUZZ_MAX_LEN_header := 4096
FUZZ_MAX_LEN_frame := 65536
FUZZ_MAX_LEN_trace := 8192
FUZZ_MAX_LEN_config := 4096
FUZZ_MAX_LEN_catalog := 8192
FUZZ_MAX_LEN_pool := 65536
FUZZ_MAX_LEN_rdma := 1024
FUZZ_OBJS_trace := build-fuzz/launch/worker/trace.o
fuzz-build:
	$(Q)scripts/install-deps build fuzz
	$(Q)$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang \
		SANITIZE=address,undefined CFLAGS="-O1 -g -fsanitize=fuzzer-no-link" \
		build-fuzz/libselene.a build-fuzz/launch/worker/trace.o
	$(Q)$(MAKE) --no-print-directory $(FUZZ_TARGETS:%=build-fuzz/fuzz_%)

# Linked every time: the library beneath is another make's (BUILD=build-fuzz).
build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c FORCE
	@$(if $(Q),echo "  FUZZ    $@")
	$(Q)clang -std=c11 -D_GNU_SOURCE -I. -Iinclude -g -O1 \
		-fsanitize=fuzzer,address,undefined $< $(FUZZ_OBJS_$*) \
		build-fuzz/libselene.a $(PKG_LIBS) -lpthread -ldl -o $@

fuzz: fuzz-build
	$(Q)$(MAKE) --no-print-directory -j1 $(FUZZ_TARGETS:%=fuzz-run-%)

fuzz-run-%:
	$(Q)mkdir -p build-fuzz/corpus-$*
	$(Q)build-fuzz/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -max_len=$(FUZZ_MAX_LEN_$*) \
		build-fuzz/corpus-$* tests/fuzz/corpus-$*

# The fault loops (tests/torture/torture.py): kill -9 of ranks and mpirun,
# on a plain workload and on one that evicts and compacts all the time,
# every failpoint on rank zero and on a peer (the unlink and truncate ones
# on each rank of the evicting workload), a read error at startup on each
# rank, corrupted records, a storm on the join port, a pool manager under
# hostile connections and kills mid-claim, and the fuzz targets;
# a table of tries and outcomes. About 14 minutes on 2 cores;
# TORTURE_QUICK=1 for 3-5 minutes. Knobs: TORTURE_SEED, TORTURE_JOBS,
# TORTURE_FUZZ_SECONDS, TORTURE_SKIP_STORM=1, TORTURE_EVICT_KILLS.
torture:
	$(Q)scripts/install-deps build fuzz
	$(Q)$(MAKE) --no-print-directory all fuzz-build
	$(Q)/usr/bin/python3 tests/torture/torture.py --program $(abspath $(PROGRAM))

check-asan:
	$(Q)scripts/install-deps test
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan \
		SANITIZE=address,undefined CFLAGS="-O1 -g" test

# The thread-heavy tests, then three ranks of the program (tests/tsan-ranks.sh),
# under ThreadSanitizer (build-tsan/); any report fails the run.
TSAN_TESTS := $(sort api cluster dir disk engine engine_stress failpoint fanout join link pool pool_attach pool_client pool_link protocol store warm)
TSAN_OPTIONS ?= halt_on_error=1 second_deadlock_stack=1
check-tsan:
	$(Q)scripts/install-deps test
	$(Q)$(MAKE) --no-print-directory BUILD=build-tsan SANITIZE=thread CFLAGS="-O1 -g" \
		build-tsan/selene $(TSAN_TESTS:%=build-tsan/tests/test_%)
	$(Q)TSAN_OPTIONS="$(TSAN_OPTIONS)" SELENE_PROGRAM=$(abspath build-tsan/selene) \
		SELENE_TEST_TIME_SCALE=4 tests/run-tests $(TSAN_TESTS:%=build-tsan/tests/test_%)
	$(Q)TSAN_OPTIONS="$(TSAN_OPTIONS)" tests/tsan-ranks.sh build-tsan/selene

# Every group (scripts/install-deps says which target needs which).
deps:
	$(Q)scripts/install-deps build test fuzz qualify python metrics

demo:
	$(Q)scripts/install-deps build
	$(Q)$(MAKE) --no-print-directory all
	$(Q)launch/demo.sh $(PROGRAM)

# The multihost qualification (tests/qualify/multihost.sh): the reference
# worker through three phases on 4 ranks over loopback, then on 3 network
# namespaces of this machine as hosts (root), mpirun across them.
qualify:
	$(Q)scripts/install-deps build qualify
	$(Q)$(MAKE) --no-print-directory all
	$(Q)tests/qualify/multihost.sh loopback $(PROGRAM) 4
	$(Q)tests/qualify/multihost.sh netns $(PROGRAM) 3

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin \
		$(DESTDIR)$(PREFIX)/include/selene $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(STATIC_LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED_LIB) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libselene.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libselene.so.$(SONAME_MAJOR)
	ln -sf libselene.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libselene.so
	install -m 644 include/selene/*.h $(DESTDIR)$(PREFIX)/include/selene/
	install -m 755 $(PROGRAM) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
		selene.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/selene.pc

clean:
	rm -rf build build-asan build-tsan build-fuzz

.PHONY: all tests test test-python test-gpu check-asan check-tsan fuzz fuzz-build torture FORCE deps demo qualify install clean
.SECONDARY:

-include $(LIB_OBJS:.o=.d) $(PROG_OBJS:.o=.d) $(TEST_BINS:=.d) $(BUILD)/tests/testutil.d \
	$(BUILD)/tests/fake_verbs.d $(BUILD)/tests/pool_fixture.d \
	$(BUILD)/tests/gpu/test_cuda.d
