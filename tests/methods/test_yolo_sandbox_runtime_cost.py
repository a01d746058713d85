"""The sandbox bounds what generated code costs when it runs inside training, and refuses
hostile code in seconds: one test per category of ``experiments/sandbox_refusals.py``,
each asserting the reason and the time of every refusal."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.sandbox_refusals import (
    CONSTANTS,
    HOSTILE_CODE,
    STATE,
    reference_functions,
    refuse,
)
from jaxmarl_llm.methods.yolo import SandboxLimits, UnsafeCode, check_source, compile_function
from jaxmarl_llm.methods.yolo.sandbox import _run_time_cost


def _assert_refused_in_seconds(category: str, isolate: bool = False, **limits):
    """Every case of ``category`` is refused with its reason; one that is refused before
    its trace, or by the jaxpr walk, within 5 s of wall clock. A case that needs the
    isolated trace is stopped by the child's CPU or memory limit: within 5 s of CPU
    (its wall clock on a loaded shared machine is several times that)."""
    _, cases = HOSTILE_CODE[category]
    for case in cases:
        if case.needs_child:  # nothing in the syntax gives it away
            check_source(case.source, "planning_function", constants=CONSTANTS)
        reason, wall, cpu = refuse(case, isolate=isolate or case.needs_child, **limits)
        assert re.search(case.reason, reason), (case.name, reason)
        if case.needs_child:
            assert cpu < 5.0 and wall < 30.0, (case.name, wall, cpu)
        else:
            assert wall < 5.0, (case.name, wall)


def test_an_unbounded_while_loop_is_refused():
    _assert_refused_in_seconds("unbounded while loop")


def test_a_fori_loop_with_a_traced_bound_is_refused():
    _assert_refused_in_seconds("fori_loop with a traced bound")


def test_a_huge_fori_loop_is_refused():
    _assert_refused_in_seconds("huge fori_loop / scan")


def test_work_not_bounded_by_the_input_and_output_is_refused():
    _assert_refused_in_seconds("work not bounded by the input and output")


def test_power_towers_and_exploding_constants_are_refused():
    _assert_refused_in_seconds("power towers and exploding constants")


def test_string_and_list_repetition_is_refused():
    _assert_refused_in_seconds("string and list repetition")


def test_a_huge_range_is_refused():
    _assert_refused_in_seconds("huge range")


def test_recursion_and_deep_nesting_are_refused():
    _assert_refused_in_seconds("recursion and deep nesting")


def test_comprehensions_are_refused():
    _assert_refused_in_seconds("comprehensions")


def test_python_work_no_syntax_check_sees_is_cut_off_by_the_child_limits():
    _assert_refused_in_seconds("Python work no syntax check sees", trace_cpu_seconds=1.0)


def test_every_category_has_its_test():
    assert all(test in globals() for test, _ in HOSTILE_CODE.values())


def test_the_isolated_trace_refuses_a_run_time_loop_like_the_in_process_one():
    (case,) = HOSTILE_CODE["fori_loop with a traced bound"][1]
    reason, wall, cpu = refuse(case, isolate=True)
    assert re.search(case.reason, reason) and cpu < 5.0 and wall < 30.0


def test_arithmetic_on_small_or_unknown_values_still_compiles():
    source = (
        "def planning_function(s):\n"
        "    d = ((s['food'] - s['agents']) ** 2).sum(-1)\n"
        "    tasks = [TARGET_FOOD_0] * NUM_AGENTS\n"
        "    for i in range(2 * NUM_AGENTS - NUM_AGENTS):\n"
        "        tasks[i] = jnp.where(d[i] > 2**2, TARGET_FOOD_1, tasks[i])\n"
        "    return jnp.stack(tasks)"
    )
    fn = compile_function(
        source, "planning_function", (STATE,), (2,), constants=CONSTANTS, isolate=False
    )
    np.testing.assert_array_equal(fn(STATE), [1, 0])


def _spin(x):
    return jax.lax.while_loop(lambda v: v.sum() > 0, lambda v: v - 1, x)


def test_a_while_loop_reached_through_a_helper_is_refused_by_the_jaxpr_walk():
    source = "def planning_function(s):\n    return spin(jnp.ones(2, jnp.int32))"
    with pytest.raises(UnsafeCode, match="trip count is not a static constant"):
        compile_function(
            source, "planning_function", (STATE,), (2,), helpers={"spin": _spin}, isolate=False
        )


def test_loop_bodies_count_once_per_step_and_a_matmul_by_its_multiply_adds():
    def body(x):
        return jax.lax.fori_loop(0, 10, lambda i, v: v * 2.0, x)

    looped, _ = _run_time_cost(jax.make_jaxpr(body)(jnp.ones(100)).jaxpr, SandboxLimits())
    once, _ = _run_time_cost(
        jax.make_jaxpr(lambda x: x * 2.0)(jnp.ones(100)).jaxpr, SandboxLimits()
    )
    assert looped >= 10 * once
    matmul, moved = _run_time_cost(
        jax.make_jaxpr(jnp.dot)(jnp.ones((30, 40)), jnp.ones((40, 50))).jaxpr, SandboxLimits()
    )
    assert matmul == 2 * 30 * 40 * 50 and moved == 4 * (30 * 40 + 40 * 50 + 30 * 50)
    branches = jax.make_jaxpr(
        lambda p, x: jax.lax.cond(p, lambda v: jnp.dot(v, v), lambda v: v, x)
    )(True, jnp.ones((20, 20)))
    dearer = 2 * 20**3
    assert dearer <= _run_time_cost(branches.jaxpr, SandboxLimits())[0] < dearer + 20**2


def test_the_run_time_refusal_is_fed_back_to_the_model():
    from jaxmarl_llm.methods.yolo import compile_with_retries

    (case,) = HOSTILE_CODE["huge fori_loop / scan"][1]
    good = "def planning_function(s):\n    return jnp.zeros(2, jnp.int32)"
    answers, asked_with = iter([case.source, good]), []

    def ask(previous_error):
        asked_with.append(previous_error)
        return next(answers)

    def compile_source(source):
        return compile_function(
            source, "planning_function", (STATE,), (2,), constants=CONSTANTS, isolate=False
        )

    _, source, errors = compile_with_retries(ask, compile_source, attempts=2)
    assert source == good and asked_with[1] == errors[0]
    assert "loop of 1000000 steps" in asked_with[1]


def test_every_reference_function_compiles_far_below_the_cost_limits():
    """Each planning and reward function the project ships passes with limits a hundred
    times tighter than the defaults (loops and arrays as they are)."""
    tight = SandboxLimits(max_flops_per_element=100.0, max_bytes_per_element=1000.0)
    rows = reference_functions()
    labels = " ".join(label for label, *_ in rows)
    assert "smax:3m reference" in labels and "paper reward (appendix E): compute_reward" in labels
    assert len(rows) >= 15
    for label, source, name, args, n, kind, constants in rows:
        try:
            compile_function(
                source, name, args, (n,), kind, constants=constants, limits=tight, isolate=False
            )
        except UnsafeCode as e:
            raise AssertionError(f"{label}: {e}") from None
