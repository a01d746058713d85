"""The XLA flags the test suite compiles with (``conftest.py`` sets them), and the
product's, for the checks that hold only under the product's compiler."""

import os

# flag name -> the suite's value. -O0 and XLA:CPU's older loop emitters compile fastest;
# both change float rounding in the last bits, nothing else.
SUITE_FLAGS = {
    "xla_backend_optimization_level": "0",
    "xla_cpu_use_fusion_emitters": "false",
}
# the suite's flag that changes which floats a program gives, and the product's value
FLOAT_FLAG, PRODUCT_VALUE = "xla_cpu_use_fusion_emitters", "true"


def with_suite_flags(flags: str) -> str:
    """``flags`` with every suite flag it does not set itself."""
    for name, value in SUITE_FLAGS.items():
        if name not in flags:
            flags = f"{flags} --{name}={value}".strip()
    return flags


def with_product_floats(flags: str) -> str:
    """``flags`` with the product's fusion emitters in place of the suite's."""
    suite = f"--{FLOAT_FLAG}={SUITE_FLAGS[FLOAT_FLAG]}"
    return flags.replace(suite, f"--{FLOAT_FLAG}={PRODUCT_VALUE}")


def floats_as_in_the_product() -> bool:
    """Whether this process compiles floats as the product does."""
    return f"--{FLOAT_FLAG}={SUITE_FLAGS[FLOAT_FLAG]}" not in os.environ.get("XLA_FLAGS", "")
