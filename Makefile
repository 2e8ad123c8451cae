# tidemq: `make run` starts a broker on ./data, `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
SPARK_STAMP := $(VENV)/.installed-spark
BENCH_STAMP := $(VENV)/.installed-bench
STORE ?= ./data

.PHONY: venv native test-native-asan run test test-fast test-console lint openapi settings-doc bench-store bench-reserve bench-offsets bench-kernels bench-http bench-acl bench-request-metrics bench-ha bench-spark bench-compare bench-schedule bench-timer bench-held-polls bench-held-memory bench-sql-filter bench-streams bench-http-clients bench-vs-redis bench-batch-vs-redis bench-instructions bench-pop bench-push bench-topics cluster bench-cluster clean

# setuptools >= 77 reads pyproject.toml's SPDX license; the venv's bundled one is older.
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip 'setuptools>=77'

# setup.py is also run by the venv's own setuptools (make native, the package-data test): at least
# 77, which reads the SPDX license string of pyproject.toml.
$(STAMP): pyproject.toml setup.py | $(PY)
	$(PIP) install -q --upgrade 'setuptools>=77'
	$(PIP) install -q -e '.[test]' --config-settings editable_mode=compat
	touch $@

# What the broker needs to run, without the test extra; the editable install builds store._kernels and app._http in
# place (default editable mode: no deprecated compat mode), again when the C sources change.
$(RUN_STAMP): pyproject.toml setup.py $(wildcard store/_native/*) $(wildcard app/_native/*) | $(PY)
	$(PIP) install -q -e .
	touch $@

$(SPARK_STAMP): pyproject.toml $(STAMP)
	$(PIP) install -q -e '.[test,spark,bench]' --config-settings editable_mode=compat
	touch $@

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(PIP) install -q -e '.[test,bench]' --config-settings editable_mode=compat
	touch $@

venv: $(STAMP) native

# store._kernels and app._http (C, setup.py) are built in place by the editable install; this rebuilds
# them when store/_native/ or app/_native/ changes (setuptools compares the sources and headers with the built module).
native: $(STAMP)
	$(PY) setup.py -q build_ext --inplace

# The kernel tests against a build with AddressSanitizer. CPython itself is not built with ASan,
# so libasan is preloaded and leak detection is off (the interpreter keeps memory until exit by
# design); out-of-bounds reads and writes in the kernels are still caught. The normal build is
# restored afterwards. Not part of CI (docs/native.md).
# -UNDEBUG: the kernels' assertions are on in this build (off in the normal one, setup.py).
ASAN_FLAGS := -fsanitize=address -fno-omit-frame-pointer -g -O1 -UNDEBUG
test-native-asan: $(STAMP)
	TIDEMQ_NATIVE_CFLAGS="$(ASAN_FLAGS)" TIDEMQ_NATIVE_LDFLAGS="-fsanitize=address" \
		$(PY) setup.py -q build_ext --inplace --force --build-temp build/asan
	ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD="$$(gcc -print-file-name=libasan.so)" \
		$(PY) -m pytest -q -p no:cacheprovider tests/store/test_native_kernels.py tests/store/test_native_apply.py tests/store/test_native_checks.py tests/store/test_native_put.py tests/store/test_put_lane.py tests/store/test_mapping.py tests/store/test_group_flush.py tests/store/test_flush_and_concurrency.py tests/store/test_native_sql.py tests/store/test_sql_eval.py tests/app/test_message_views.py tests/app/test_json_produce.py tests/app/test_whole_request.py tests/app/test_produce_lane.py; \
		rc=$$?; $(PY) setup.py -q build_ext --inplace --force; exit $$rc

# Serves on 127.0.0.1:8080; topics are created explicitly (PUT /v1/topics/NAME or `tidemq topics create NAME`),
# as in production. A development venv (make venv: editable, with the test extra) is served as it is, its
# extension rebuilt in place; otherwise the broker is installed without the test extra. Push subscriptions may
# deliver to this machine (the quick start's receiver); a broker allows no push target by default.
run: | $(PY)
	@if [ -f $(STAMP) ]; then $(PY) setup.py -q build_ext --inplace; else $(MAKE) --no-print-directory $(RUN_STAMP); fi
	TIDEMQ_PUSH_ALLOWED_HOSTS=127.0.0.1 $(VENV)/bin/tidemq serve --store $(STORE)

# Lint first (ruff, ruff format, mypy), then the suite on three workers (measured best on two cores: the tests wait on I/O and peers); Spark tests share one worker
# (one xdist group, so one JVM).
test: $(SPARK_STAMP) native
	$(MAKE) --no-print-directory lint
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -n 3 --dist loadgroup

test-fast: $(STAMP) native
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n 3 --dist loadgroup -m "not spark"

# The web console in headless Chromium (Debian's /usr/bin/chromium; skipped without it). Screenshots: tests/artifacts/console/.
test-console: $(STAMP)
	$(PY) -m pytest -q tests/app/test_console.py tests/app/test_console_push.py tests/app/test_console_acl.py tests/app/test_console_assets.py tests/ha/test_console_replication.py

# mypy reads pipeline/'s pyspark imports: lint needs the spark extra installed.
lint: $(SPARK_STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy core app store ha pipeline tidemq cluster
	$(PY) -m mypy --explicit-package-bases bench
	$(PY) -m mypy tests
	$(PY) -m ruff format --check core store app ha pipeline tidemq cluster bench tests setup.py

openapi: $(STAMP)
	$(PY) -m app.openapi_export openapi/openapi.json

settings-doc: $(STAMP)
	$(PY) -m app.settings_doc docs/settings.md

# Puts, gets, dispatch and SYNC_FLUSH group commit beside memcpy/write/fdatasync baselines, CPU per message on every row
# (QUICK=1: small counts).
bench-store: $(STAMP) native
	$(PY) bench/store_bench.py $(if $(QUICK),--quick)

# Put throughput and CPU per put with blocks reserved ahead against whole files reserved at creation (QUICK=1: a smoke test).
bench-reserve: $(STAMP) native
	$(PY) bench/reserve_bench.py $(if $(QUICK),--quick)

bench-kernels: $(STAMP) native
	$(PY) bench/kernel_bench.py

bench-offsets: $(STAMP) native
	$(PY) bench/offset_commit_bench.py

# 100,000 topic creations over HTTP: the rate and the broker's CPU per creation in each tenth (TOPICS=N for fewer).
bench-topics: $(STAMP) native
	$(PY) bench/topics_bench.py $(if $(TOPICS),--topics $(TOPICS))

bench-schedule: $(STAMP)
	$(PY) bench/schedule_bench.py

bench-timer: $(STAMP) native
	$(PY) bench/timer_bench.py

# wrk against the broker and a plain-ASGI no-op: rates, server CPU per request, CPU ratios (QUICK=1: 2 s per scenario).
bench-http: $(BENCH_STAMP)
	$(PY) bench/http_bench.py $(if $(QUICK),--quick)

# Single JSON produces without and with an ACL (a bearer token judged per request): CPU per request, its ratio.
bench-acl: $(BENCH_STAMP)
	$(PY) -m bench.acl_bench $(if $(QUICK),--seconds 1)

# What counting each HTTP request (and the access log) adds per request, in process (QUICK=1: a smoke test).
bench-request-metrics: $(STAMP) native
	$(PY) bench/request_metrics_bench.py $(if $(QUICK),--quick)

bench-ha: $(BENCH_STAMP)
	$(PY) bench/ha_bench.py

bench-spark: $(SPARK_STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/spark_bench.py

# A filtered pull against the unfiltered pull of the same messages, in process and over HTTP (QUICK=1: a smoke test).
bench-sql-filter: $(STAMP) native
	$(PY) bench/sql_filter_bench.py $(if $(QUICK),--quick)

bench-held-polls: $(BENCH_STAMP)
	$(PY) bench/held_polls_bench.py

# The memory one held long poll costs the broker, against one blocked XREAD BLOCK in Redis (same load generator).
bench-held-memory: $(BENCH_STAMP)
	$(PY) bench/held_memory_bench.py

# Event streams beside produces, long polls and /metrics, and a never-acking stream's memory (QUICK=1: 1-minute runs).
bench-streams: $(BENCH_STAMP)
	$(PY) bench/stream_bench.py $(if $(QUICK),--quick)

# Single produce with 8 in flight through httpx, aiohttp, urllib3, requests, http.client and tidemq.client
# (QUICK=1: a smoke test).
bench-http-clients: $(BENCH_STAMP)
	$(PY) bench/http_clients_bench.py $(if $(QUICK),--quick)

# tidemq beside Redis Streams and a plain-ASGI no-op, one C load generator for both (bench/loadgen.c): requests,
# SYNC_FLUSH against appendfsync always, 1 KiB delivery and receive + ack latency, Python clients (QUICK=1: 2 s runs).
# User-space instructions per request (callgrind), BEFORE=<another checkout, its extension built> against this tree.
bench-instructions: $(STAMP) native
	$(PY) bench/request_instructions.py --before $(BEFORE)

bench-vs-redis: $(BENCH_STAMP)
	$(PY) bench/versus_redis.py $(if $(QUICK),--quick)

# Batch produce beside 100 pipelined XADDs from one C load generator, and httpx beside redis-py pipelines (QUICK=1: a smoke test).
bench-batch-vs-redis: $(BENCH_STAMP)
	$(PY) bench/versus_redis.py --only requests,batch $(if $(QUICK),--quick)

# Group consumption: receive + ack against the offset pull and Redis Streams XREADGROUP + XACK, 8 consumers
# (QUICK=1: a smoke test; PROFILE=FILE: py-spy profile of the broker during receive + ack).
bench-pop: $(BENCH_STAMP) native
	$(PY) bench/pop_bench.py $(if $(QUICK),--quick) $(if $(PROFILE),--profile $(PROFILE))

bench-push: $(STAMP) native
	$(PY) bench/push_bench.py $(if $(QUICK),--quick)

# etcd and two broker groups of two on loopback (docs/cluster.md), their data in ./data-cluster; Ctrl-C stops them.
cluster: $(STAMP) native
	$(PY) -m cluster.local_cluster ./data-cluster

# Produce throughput of two broker groups against one, and the failover window (p50/max) under SYNC_MASTER load.
bench-cluster: $(BENCH_STAMP) native
	$(PY) bench/cluster_bench.py $(if $(QUICK),--quick)

bench-compare: $(BENCH_STAMP)
	$(PY) bench/compare.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build store/_kernels*.so
