"""Builds store._kernels, the C data-path kernels, and app._http, the whole-request reader of the hot
routes (docs/native.md); the rest is in pyproject.toml.

TIDEMQ_NATIVE_CFLAGS adds compiler flags after these (make test-native-asan passes -fsanitize=address
and -UNDEBUG, which turns the kernels' assertions on: docs/native.md "Assertions").
"""

import os

from setuptools import Extension, setup

NATIVE = "store/_native"
# -Werror: a warning is a defect here, not noise. -DNDEBUG: the assertions of internal invariants are
# compiled out of the normal build (an abort would take the broker down with a signal).
CFLAGS = ["-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-DNDEBUG", *os.environ.get("TIDEMQ_NATIVE_CFLAGS", "").split()]

setup(
    ext_modules=[
        Extension(
            "store._kernels",
            sources=[
                f"{NATIVE}/kernels.c",
                f"{NATIVE}/encode.c",
                f"{NATIVE}/scan.c",
                f"{NATIVE}/gather.c",
                f"{NATIVE}/sql.c",
                f"{NATIVE}/apply.c",
                f"{NATIVE}/prefault.c",
                f"{NATIVE}/crc32.c",
                f"{NATIVE}/view.c",
                f"{NATIVE}/produce.c",
                f"{NATIVE}/produce_reply.c",
                f"{NATIVE}/mapping.c",
                f"{NATIVE}/group_flush.c",
            ],
            depends=[
                f"{NATIVE}/kernels.h",
                f"{NATIVE}/bytes.h",
                f"{NATIVE}/gather_binding.h",
                f"{NATIVE}/apply_binding.h",
                f"{NATIVE}/mapping_binding.h",
                f"{NATIVE}/group_flush_binding.h",
                f"{NATIVE}/sql_binding.h",
                f"{NATIVE}/produce_binding.h",
                f"{NATIVE}/put_lane_binding.h",
                f"{NATIVE}/properties_binding.h",
            ],
            extra_compile_args=CFLAGS,
            extra_link_args=os.environ.get("TIDEMQ_NATIVE_LDFLAGS", "").split(),
        ),
        Extension(
            "app._http",
            sources=["app/_native/http_request.c", "app/_native/produce_request.c", "app/_native/http_binding.c"],
            depends=["app/_native/http_request.h", "app/_native/produce_request.h"],
            extra_compile_args=CFLAGS,
            extra_link_args=os.environ.get("TIDEMQ_NATIVE_LDFLAGS", "").split(),
        ),
    ]
)
