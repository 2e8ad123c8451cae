# tidemq: `make run` starts a broker on ./data, `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
SPARK_STAMP := $(VENV)/.installed-spark
BENCH_STAMP := $(VENV)/.installed-bench
STORE ?= ./data

.PHONY: venv run test test-fast lint openapi bench-store bench-offsets bench-http bench-ha bench-spark bench-compare bench-schedule clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q -e '.[test]' --config-settings editable_mode=compat
	touch $@

$(SPARK_STAMP): pyproject.toml $(STAMP)
	$(PIP) install -q -e '.[test,spark,bench]' --config-settings editable_mode=compat
	touch $@

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(PIP) install -q -e '.[test,bench]' --config-settings editable_mode=compat
	touch $@

venv: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/tidemq serve --store $(STORE)

test: $(SPARK_STAMP)
	$(PY) -m ruff check .
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -m "not spark"

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check store app ha pipeline bench tests

openapi: $(STAMP)
	$(PY) -m app.openapi_export openapi/openapi.json

bench-store: $(STAMP)
	$(PY) bench/store_bench.py

bench-offsets: $(STAMP)
	$(PY) bench/offset_commit_bench.py

bench-schedule: $(STAMP)
	$(PY) bench/schedule_bench.py

bench-http: $(BENCH_STAMP)
	$(PY) bench/http_bench.py

bench-ha: $(BENCH_STAMP)
	$(PY) bench/ha_bench.py

bench-spark: $(SPARK_STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/spark_bench.py

bench-compare: $(BENCH_STAMP)
	$(PY) bench/compare.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
