# bulkhead: build the LD_PRELOAD shim, the bulkhead command, the test
# programs; run the demo, the suites and the benchmark.
#
#   make            build/libbulkhead.so and build/bulkhead
#   make demo       install what is missing, build, show a program being capped
#   make unit       the C unit tests (tests/unit, cmocka): seconds
#   make test       install what is missing, build, run make unit, then the
#                   bats suite
#   make test-asan, test-ubsan, test-tsan
#                   unit tests and bats files against a sanitized shim
#   make fuzz       libFuzzer on the rules parser and the matcher, each for
#                   FUZZ_SECONDS (default 60)
#   make bench      install what is missing, build, measure (see docs/bench.md)
#   make install    the Debian packages' layout under DESTDIR and PREFIX
#                   (default /usr/local): BINDIR, LIBDIR, MANDIR, DOCDIR and
#                   UNITDIR can each be set; the rules go to DESTDIR/etc
#   make deb        install what is missing, build the .deb files from a
#                   clean copy into build/deb/ (scripts/make-deb.sh)
#   make deb-check  lintian, contents, the unpacked command and shim, the
#                   packages installed in an overlay (scripts/check-deb.sh);
#                   by hand, scripts/check-multiarch.sh: a 32- and a 64-bit
#                   program capped together (downloads an i386 toolchain)
#
# CFLAGS, CPPFLAGS and LDFLAGS are yours (CFLAGS defaults to -O2 -g), as
# dpkg-buildflags hands them over: `make CFLAGS=-O0` keeps every flag the
# project needs, which live in BH_CFLAGS and SHIM_LDFLAGS.

CC      ?= cc
CLANG   ?= clang
BUILD   := build

# Where make install puts things. The shim goes to LIBDIR/bulkhead/, with
# LIBDIR PREFIX/lib/<multiarch triplet>: `bulkhead run` preloads
# BINDIR/../$LIB/bulkhead/libbulkhead.so, which each program's own loader
# expands to its own lib/<triplet> (cli/cmd_run.c), so 32- and 64-bit
# programs each get their shim.
ifeq ($(origin MULTIARCH),undefined)
MULTIARCH  := $(shell $(CC) -print-multiarch 2>/dev/null)
endif
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib$(if $(MULTIARCH),/$(MULTIARCH))
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/bulkhead
MONITORDIR ?= $(PREFIX)/share/bulkhead-agent/monitoring
UNITDIR    ?= $(PREFIX)/lib/systemd/system
# Every man page: man/NAME.SECTION.
MAN_PAGES := $(wildcard man/*.[1-8])

WARN      := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS    ?= -O2 -g
CPPFLAGS  ?=
LDFLAGS   ?=
BH_CFLAGS := -std=gnu11 $(WARN) -fPIC -fvisibility=hidden -D_GNU_SOURCE -Ishim
# Link-time optimisation for the shim, the command and the agent (not the
# sanitizer tiers, unit programs or fuzzers): calls to BH_INLINED_ACROSS
# functions (shim/libc/inlined.h) are inlined across files.
LTO       := -flto=auto
# inih is linked statically and hidden (--exclude-libs) so a host program
# with its own ini_parse can neither break the shim nor be broken by it.
INIH    := -l:libinih.a
SHIM_LDFLAGS := -shared -Wl,--exclude-libs,ALL -Wl,-z,defs -Wl,-z,now

# Code shared by the shim and the command: config, rules, permits, breaker,
# admission, the log and deadlines (the command's seccomp supervisor admits
# connects of the programs it runs as the shim does).
CORE_SRC := $(wildcard shim/libc/*.c shim/config/*.c shim/policy/*.c shim/rules/*.c \
                       shim/permits/*.c shim/breaker/*.c shim/adaptive/*.c \
                       shim/admission/*.c shim/log/*.c) shim/core/deadline.c
# The shim proper: start-up, real-symbol table, fd tracking, hooks.
SHIM_SRC := $(filter-out $(CORE_SRC),$(wildcard shim/core/*.c shim/fdtable/*.c \
                                                 shim/readiness/*.c shim/hooks/*.c))
CLI_SRC  := $(wildcard cli/*.c cli/supervisor/*.c)
# The fleet agent: a program of its own, the only one linking hiredis and
# libmicrohttpd; it shares the stat renderer and the password file rule
# with the command.
AGENT_SRC := $(wildcard agent/*.c) cli/stat_render.c cli/password_file.c
TEST_SRC := $(wildcard tests/clients/*.c)
# What the unit tests and fuzzers link: the parser, the matcher, the log, the fd table,
# the permits and breaker (test_breaker makes a namespace of its own), the
# readiness layer and the real-symbol table they reach libc through.
UNIT_CODE := $(wildcard shim/libc/*.c shim/config/*.c shim/policy/*.c shim/rules/*.c shim/log/*.c \
                        shim/fdtable/*.c shim/permits/*.c shim/breaker/*.c shim/adaptive/*.c \
                        shim/readiness/*.c)
UNIT_SRC  := $(wildcard tests/unit/test_*.c)
UNIT_NAMES := $(UNIT_SRC:tests/unit/%.c=%)

CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
SHIM_OBJ := $(SHIM_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
AGENT_OBJ := $(AGENT_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/clients/%.c=$(BUILD)/tests/%)

SHIM := $(BUILD)/libbulkhead.so
CLI  := $(BUILD)/bulkhead
AGENT := $(BUILD)/bulkhead-agent

.PHONY: all deps demo unit test bench install clean fuzz soak deb deb-check \
        test-asan test-ubsan test-tsan
all: $(SHIM) $(CLI) $(AGENT)
# Objects built on the way to a unit test or fuzzer are kept for the next
# build, not deleted as intermediates.
.SECONDARY:

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(BH_CFLAGS) $(LTO) $(CFLAGS) -MMD -MP -c $< -o $@

$(SHIM): $(CORE_OBJ) $(SHIM_OBJ)
	$(CC) $(LTO) $(CFLAGS) $(LDFLAGS) $(SHIM_LDFLAGS) -o $@ $^ $(INIH) -ldl -lpthread

$(CLI_OBJ): BH_CFLAGS += -Icli
$(CLI): $(CORE_OBJ) $(CLI_OBJ)
	$(CC) $(LTO) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(INIH) -lpthread -lm

# lease.lua, the Redis script, as a C string the agent loads.
$(BUILD)/agent/lease_lua.h: agent/lease.lua
	@mkdir -p $(dir $@)
	{ printf '#define LEASE_LUA \\\n'; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$$/\\n" \\/' $<; \
	  printf '    ""\n'; } >$@
$(BUILD)/obj/agent/lease.o: $(BUILD)/agent/lease_lua.h
$(AGENT_OBJ): BH_CFLAGS += -I$(BUILD)/agent -Icli
# bulkhead run looks for the shim in ../lib/MULTIARCH/bulkhead/.
$(BUILD)/obj/cli/cmd_run.o: BH_CFLAGS += -DBH_MULTIARCH='"$(MULTIARCH)"'

$(AGENT): $(CORE_OBJ) $(AGENT_OBJ)
	$(CC) $(LTO) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(INIH) -lhiredis -lmicrohttpd -lpthread

# Every client includes client_util.h: a change there rebuilds them all,
# also in a build directory made before this rule existed.
$(BUILD)/tests/%: tests/clients/%.c $(wildcard tests/clients/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(BH_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< -lpthread

# ---- unit tests -------------------------------------------------------------

# $(call unit_rules,DIR,EXTRA_FLAGS): DIR/unit/test_NAME from
# tests/unit/test_NAME.c and the code under test, compiled into DIR/obj.
define unit_rules
$(1)/obj/tests/unit/%.o: tests/unit/%.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(BH_CFLAGS) $$(CFLAGS) $(2) -MMD -MP -c $$< -o $$@

$(1)/unit/%: $(1)/obj/tests/unit/%.o $(UNIT_CODE:%.c=$(1)/obj/%.o)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) $(2) -o $$@ $$^ -lcmocka $$(INIH) $$(UNIT_LIBS) -ldl -lpthread -lm

# test_lease: the agent's lease.c (and sentinel.c, which it calls) too, with
# hiredis, as the agent links them.
$(1)/unit/test_lease: $(1)/obj/agent/lease.o $(1)/obj/agent/sentinel.o
$(1)/unit/test_lease: UNIT_LIBS := -lhiredis
$(1)/obj/agent/lease.o: $(BUILD)/agent/lease_lua.h
$(1)/obj/agent/lease.o $(1)/obj/tests/unit/test_lease.o: BH_CFLAGS += -I$(BUILD)/agent -Iagent
# test_filter: the supervisor's seccomp filter, run by the test.
$(1)/unit/test_filter: $(1)/obj/cli/supervisor/filter.o
$(1)/obj/cli/supervisor/filter.o $(1)/obj/tests/unit/test_filter.o: BH_CFLAGS += -Icli
endef
$(eval $(call unit_rules,$(BUILD),))

UNIT_BIN := $(UNIT_NAMES:%=$(BUILD)/unit/%)

# Every program runs even when one fails; the status says whether any did.
# $(1): the directory holding unit/test_*.
run_units = status=0; for t in $(UNIT_NAMES); do \
	    echo "== $(1)/unit/$$t"; $(1)/unit/$$t || status=1; done; exit $$status

unit: deps
	$(MAKE) $(UNIT_BIN)
	@$(call run_units,$(BUILD))

# ---- sanitizers ---------------------------------------------------------------
#
# Each builds the unit tests with gcc's sanitizer into build/SAN/unit (and
# for asan and ubsan the shim, build/SAN/libbulkhead.so), then runs
# scripts/run-sanitized.sh: the unit programs, then the bats files below
# against that shim with the runtime preloaded ahead of it. Every report
# goes to build/SAN/reports/; any report there fails the target.
#   ubsan: every bats file but cli*.bats and packaging.bats (they always
#     run build/libbulkhead.so or an installed copy, whatever
#     BULKHEAD_TEST_SHIM says) and exports.bats (an instrumented build's
#     export list is not the product's).
#   asan: those, less caps, clients, exit_order, deadlines, deadline_paths,
#     breaker, breaker_outcomes, fleet, fleet_agent, policy_curl,
#     relative_config, event_loop_waits and discover: with the ASan runtime
#     preloaded, curl and wget hang in setlocale before main, shim or none.
#   tsan: the unit programs only (the rule index's name notes race its
#     matches there). Preloaded, the TSan runtime crashes python3 and sh at
#     start and hangs curl, so no bats file can run under it.
SAN_asan  := -fsanitize=address -fno-omit-frame-pointer
SAN_ubsan := -fsanitize=undefined -fno-sanitize-recover=all
SAN_tsan  := -fsanitize=thread
SAN_FILES_ubsan = $(filter-out tests/cli%.bats tests/exports.bats tests/packaging.bats,\
                               $(wildcard tests/*.bats))
SAN_FILES_asan  = $(filter-out tests/caps.bats tests/clients.bats tests/exit_order.bats \
                               tests/deadlines.bats tests/deadline_paths.bats \
                               tests/breaker.bats tests/breaker_outcomes.bats tests/fleet.bats \
                               tests/fleet_agent.bats tests/policy_curl.bats \
                               tests/relative_config.bats tests/event_loop_waits.bats \
                               tests/discover.bats,$(SAN_FILES_ubsan))
SAN_FILES_tsan  =
SAN_SHIM_asan   = $(BUILD)/asan/libbulkhead.so
SAN_SHIM_ubsan  = $(BUILD)/ubsan/libbulkhead.so

define sanitizer_rules
$(BUILD)/$(1)/obj/%.o: %.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(BH_CFLAGS) $$(CFLAGS) $$(SAN_$(1)) -MMD -MP -c $$< -o $$@

$(BUILD)/$(1)/libbulkhead.so: $$(CORE_SRC:%.c=$(BUILD)/$(1)/obj/%.o) \
                              $$(SHIM_SRC:%.c=$(BUILD)/$(1)/obj/%.o)
	$$(CC) $$(CFLAGS) $$(SAN_$(1)) $$(SHIM_LDFLAGS) -o $$@ $$^ $$(INIH) -ldl -lpthread

test-$(1): deps
	$$(MAKE) $$(if $$(SAN_FILES_$(1)),all $$(TEST_BIN) $$(SAN_SHIM_$(1))) \
	    $(UNIT_NAMES:%=$(BUILD)/$(1)/unit/%)
	scripts/run-sanitized.sh $(1) $(BUILD)/$(1) $$(SAN_FILES_$(1))
endef
$(foreach s,asan ubsan tsan,$(eval $(call sanitizer_rules,$(s))))
$(foreach s,asan ubsan tsan,$(eval $(call unit_rules,$(BUILD)/$(s),$$(SAN_$(s)))))

# ---- fuzzing ----------------------------------------------------------------
#
# clang's libFuzzer with ASan and UBSan; the code under test is compiled
# with the same instrumentation into build/fuzz/obj. Each harness runs for
# FUZZ_SECONDS from the seeds in tests/fuzz/corpus/NAME (new finds go to
# build/fuzz/corpus/NAME, the repo's seeds stay as they are); a crash,
# leak or sanitizer report fails the target and leaves the input in
# build/fuzz/.
FUZZ_SECONDS ?= 60
FUZZ_FLAGS := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN   := $(FUZZ_NAMES:%=$(BUILD)/fuzz/fuzz_%)

$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CLANG) $(BH_CFLAGS) -O1 -g $(subst fuzzer,fuzzer-no-link,$(FUZZ_FLAGS)) \
	    -MMD -MP -c $< -o $@

$(BUILD)/fuzz/fuzz_%: $(BUILD)/fuzz/obj/tests/fuzz/fuzz_%.o \
                      $(UNIT_CODE:%.c=$(BUILD)/fuzz/obj/%.o)
	$(CLANG) $(FUZZ_FLAGS) -o $@ $^ $(INIH) -ldl -lpthread

fuzz: deps
	$(MAKE) $(FUZZ_BIN)
	@for f in $(FUZZ_NAMES); do \
	    mkdir -p $(BUILD)/fuzz/corpus/$$f || exit 1; \
	    echo "== fuzz_$$f for $(FUZZ_SECONDS) s"; \
	    $(BUILD)/fuzz/fuzz_$$f -max_total_time=$(FUZZ_SECONDS) \
	        -artifact_prefix=$(BUILD)/fuzz/$$f- -print_final_stats=1 \
	        $(BUILD)/fuzz/corpus/$$f tests/fuzz/corpus/$$f || exit 1; \
	done

# ---- soak ---------------------------------------------------------------------
#
# Long randomised runs over a real namespace, each for SOAK_SECONDS:
# reserve_storm kills workers of every kind at random moments, mid-wait
# included, and checks after each round that every pool has exactly its
# size (tests/soak/reserve_storm.c says how); share_storm does the same to
# workers under the shim that share sockets every way it follows (fork,
# _Fork, exec, SCM_RIGHTS, peeks, connects under way, close ranges).
SOAK_SECONDS ?= 60
SOAK_NAMES := $(patsubst tests/soak/%.c,%,$(wildcard tests/soak/*.c))

$(BUILD)/soak/%: $(BUILD)/obj/tests/soak/%.o $(UNIT_CODE:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	$(CC) $(LTO) $(CFLAGS) -o $@ $^ $(INIH) -ldl -lpthread

soak: deps
	$(MAKE) all $(SOAK_NAMES:%=$(BUILD)/soak/%)
	@for s in $(SOAK_NAMES); do \
	    echo "== $$s for $(SOAK_SECONDS) s"; \
	    $(BUILD)/soak/$$s $(SOAK_SECONDS) || exit 1; \
	done

# ---- the rest -----------------------------------------------------------------

deps:
	@scripts/install-deps.sh

demo: deps
	$(MAKE) all
	scripts/demo.sh

test: unit
	$(MAKE) all $(TEST_BIN)
	scripts/run-tests.sh

bench: deps
	$(MAKE) all $(TEST_BIN)
	bench/run.sh

# The packages' layout (debian/*.install take their files from here). The
# unit names BINDIR; /etc/bulkhead/rules.ini, where the shim and the agent
# look (not under PREFIX), is the agent's conffile in the package, and
# make install never overwrites one already there.
install: all
	install -D -m 0644 $(SHIM) $(DESTDIR)$(LIBDIR)/bulkhead/libbulkhead.so
	install -D -m 0755 $(CLI) $(DESTDIR)$(BINDIR)/bulkhead
	install -D -m 0755 $(AGENT) $(DESTDIR)$(BINDIR)/bulkhead-agent
	install -d $(DESTDIR)$(UNITDIR)
	sed 's|@BINDIR@|$(BINDIR)|g' agent/bulkhead-agent.service \
	    >$(DESTDIR)$(UNITDIR)/bulkhead-agent.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/bulkhead-agent.service
	$(foreach page,$(MAN_PAGES),install -D -m 0644 $(page) \
	    $(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(page)))/$(notdir $(page));)
	install -D -m 0644 rules.ini.example $(DESTDIR)$(DOCDIR)/examples/rules.ini.example
	install -d $(DESTDIR)$(MONITORDIR)
	install -m 0644 monitoring/bulkhead.rules.yml monitoring/bulkhead.rules.test.yml \
	    monitoring/bulkhead.dashboard.json $(DESTDIR)$(MONITORDIR)
	test -e $(DESTDIR)/etc/bulkhead/rules.ini || \
	    install -D -m 0644 agent/rules.ini $(DESTDIR)/etc/bulkhead/rules.ini

# Not part of make test: dpkg-buildpackage builds everything again.
deb:
	scripts/make-deb.sh

deb-check:
	scripts/check-deb.sh

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
