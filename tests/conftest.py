"""Shared pytest configuration. Keep each addition small and in its own section."""

import pytest

# ----- tests/envs: conformance of every registered environment ----------------------------


def pytest_addoption(parser):
    parser.addoption(
        "--all-envs",
        action="store_true",
        default=False,
        help="run the full (compiled) env conformance check on every registered env, not "
        "only on one representative per env implementation",
    )
    parser.addoption(
        "--compile-profile",
        metavar="DIR",
        default=None,
        help="write each test's jax trace / lower / XLA compile seconds to DIR "
        "(tests/compile_profile.py; `python tests/compile_profile.py DIR` sums them up)",
    )


# ----- one persistent XLA compilation cache for the test session ---------------------------
# Many tests compile the same program (the tiny runner configs, the same learner under
# several checks); the xdist workers share this on-disk cache, so each program compiles
# once per run. Keys are HLO + jax version + flags, so a stale entry is never wrong.


def pytest_configure(config):
    import os

    import jax

    # Most test time is XLA compiling tiny configs, not running them. LLVM's -O0 instead
    # of -O3 compiles fastest (only the Gemma forward passes run slower), and XLA:CPU's
    # older loop emitters compile in ~60% of the time of its fusion emitters (a tiny DPM
    # run: 27 s of compiling against 46 s). Neither changes what a program computes
    # beyond float rounding. Set before the backend starts; a user's own XLA_FLAGS win.
    from xla_flags import with_suite_flags

    os.environ["XLA_FLAGS"] = with_suite_flags(os.environ.get("XLA_FLAGS", ""))

    cache = os.environ.get("JAXMARL_TEST_XLA_CACHE") or str(config.rootpath / ".xla_test_cache")
    jax.config.update("jax_compilation_cache_dir", cache)
    # the many small programs of eager array code (host-side refits, test set-ups)
    # recur across tests and workers too: cache them all
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

    if config.getoption("compile_profile"):
        from pathlib import Path

        from compile_profile import CompileProfile

        profile = CompileProfile(Path(config.getoption("compile_profile")))
        config.pluginmanager.register(profile, "compile_profile")  # its configure runs now


# ----- finished tiny runs, trained once per session ----------------------------------------
# The runner and script tests compare with, refuse to resume, or read the same finished
# run; training it once per worker saves a run per such test.


@pytest.fixture(scope="session")
def finished(tmp_path_factory):
    """``finished(algo)``: (the folder given to ``test_runner.tiny_cfg``, the result) of a
    finished tiny run evaluated after every chunk (``test_runner.EVERY_CHUNK``). Tests
    that read it must leave its train files as they are."""
    from test_runner import EVERY_CHUNK, tiny_cfg

    from jaxmarl_llm.runner import run_experiment

    runs = {}

    def get(algo):
        if algo not in runs:
            base = tmp_path_factory.mktemp(f"finished_{algo}")
            runs[algo] = base, run_experiment(tiny_cfg(base, algo, *EVERY_CHUNK))
        return runs[algo]

    return get
