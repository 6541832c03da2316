# bulkhead: build the LD_PRELOAD shim, the bulkhead command, the test
# programs; run the demo, the suite and the benchmark.
#
#   make            build/libbulkhead.so and build/bulkhead
#   make demo       install what is missing, build, show a program being capped
#   make test       install what is missing, build, run the bats suite
#   make bench      install what is missing, build, measure (see README)
#   make install    PREFIX=/usr/local DESTDIR=

CC      ?= cc
PREFIX  ?= /usr/local
DESTDIR ?=
BUILD   := build

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 $(WARN) -fPIC -fvisibility=hidden -D_GNU_SOURCE -Ishim
# inih is linked statically and hidden (--exclude-libs) so a host program
# with its own ini_parse can neither break the shim nor be broken by it.
INIH    := -l:libinih.a

# Code shared by the shim and the command: config, rules, permits.
CORE_SRC := $(wildcard shim/libc/*.c shim/config/*.c shim/rules/*.c shim/permits/*.c)
# The shim proper: start-up, log, real-symbol table, fd tracking, hooks.
SHIM_SRC := $(wildcard shim/core/*.c shim/fdtable/*.c shim/hooks/*.c)
CLI_SRC  := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/clients/*.c)

CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
SHIM_OBJ := $(SHIM_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/clients/%.c=$(BUILD)/tests/%)

SHIM := $(BUILD)/libbulkhead.so
CLI  := $(BUILD)/bulkhead

.PHONY: all deps demo test bench install clean
all: $(SHIM) $(if $(CLI_SRC),$(CLI))

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(SHIM): $(CORE_OBJ) $(SHIM_OBJ)
	$(CC) -shared -o $@ $^ -Wl,--exclude-libs,ALL -Wl,-z,defs -Wl,-z,now \
	    $(INIH) -ldl -lpthread

$(CLI): $(CORE_OBJ) $(CLI_OBJ)
	$(CC) -o $@ $^ $(INIH) -lpthread

$(BUILD)/tests/%: tests/clients/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O2 -g -D_GNU_SOURCE -o $@ $< -lpthread

deps:
	@scripts/install-deps.sh

demo: deps
	$(MAKE) all
	scripts/demo.sh

test: deps
	$(MAKE) all $(TEST_BIN)
	scripts/run-tests.sh

bench: deps
	$(MAKE) all $(TEST_BIN)
	bench/run.sh

install: all
	install -D -m 0755 $(SHIM) $(DESTDIR)$(PREFIX)/lib/bulkhead/libbulkhead.so
	install -D -m 0755 $(CLI) $(DESTDIR)$(PREFIX)/bin/bulkhead
	install -D -m 0644 bulkhead.1 $(DESTDIR)$(PREFIX)/share/man/man1/bulkhead.1
	install -D -m 0644 rules.ini.example $(DESTDIR)$(PREFIX)/share/doc/bulkhead/rules.ini.example

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
