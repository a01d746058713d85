"""The XLA:CPU settings the package adds to XLA_FLAGS on import."""

import os

import pytest

from jaxmarl_llm import xla_defaults


def test_defaults_are_added_once_and_the_users_flags_win():
    flags = xla_defaults.with_defaults("--xla_backend_optimization_level=0")
    assert flags.split() == [
        "--xla_backend_optimization_level=0",
        "--xla_cpu_experimental_ynn_fusion_type=",
    ]
    assert xla_defaults.with_defaults(flags) == flags
    own = "--xla_cpu_experimental_ynn_fusion_type=dot"
    assert xla_defaults.with_defaults(own) == own


def test_host_devices_run_one_thread_each():
    one = xla_defaults.with_defaults("--xla_force_host_platform_device_count=1")
    assert "multi_thread_eigen" not in one
    two = xla_defaults.with_defaults("--xla_force_host_platform_device_count=2")
    assert "--xla_cpu_multi_thread_eigen=false" in two.split()
    own = "--xla_force_host_platform_device_count=4 --xla_cpu_multi_thread_eigen=true"
    assert xla_defaults.with_defaults(own).count("multi_thread_eigen") == 1


def test_apply_sets_xla_flags_unless_opted_out():
    env = {}
    xla_defaults.apply(env)
    assert env["XLA_FLAGS"] == "--xla_cpu_experimental_ynn_fusion_type="
    env = {"JAXMARL_LLM_XLA_DEFAULTS": "0", "XLA_FLAGS": "--a=1"}
    xla_defaults.apply(env)
    assert env["XLA_FLAGS"] == "--a=1"


@pytest.mark.skipif(
    os.environ.get(xla_defaults.OPT_OUT) == "0", reason="the defaults are turned off"
)
def test_this_process_runs_with_the_defaults():
    assert "--xla_cpu_experimental_ynn_fusion_type=" in os.environ["XLA_FLAGS"]
