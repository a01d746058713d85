"""Hostile planning functions, one group per way generated code could hurt training, and
how long the sandbox takes to refuse each through the full path (the isolated trace
included).

    PYTHONPATH=$PWD python experiments/sandbox_refusals.py [--out DIR]

writes ``sandbox_refusals.json`` and ``sandbox_refusals.md`` (one row per case: category,
reason, wall and CPU seconds of the refusal; then the estimated cost per call of every
reference planning and reward function the project compiles) to ``DIR`` (default
``experiments/results/yolo``). ``tests/methods/test_yolo_sandbox_runtime_cost.py`` runs
the same cases.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import time
from pathlib import Path

import jax
import jax.numpy as jnp

STATE = {"food": jnp.array([[1.0, 2.0], [4.0, 0.0]]), "agents": jnp.array([[0.0, 0.0], [5.0, 1.0]])}
CONSTANTS = {"NUM_AGENTS": 2, "TARGET_FOOD_0": 0, "TARGET_FOOD_1": 1}
OUT_SHAPE = (2,)
REPO = Path(__file__).resolve().parents[1]
ACCEPTED = "ACCEPTED"


@dataclasses.dataclass(frozen=True)
class Hostile:
    name: str
    body: str  # the function's body, indented by four spaces
    reason: str  # a regex the refusal must match
    limits: tuple[tuple[str, float], ...] = ()  # SandboxLimits fields that differ
    needs_child: bool = False  # only the isolated trace's CPU/memory limits stop it

    @property
    def source(self) -> str:
        return f"def planning_function(s):\n{self.body}\n    return jnp.zeros(2, jnp.int32)\n"


# category -> (the test that runs it, its cases)
HOSTILE_CODE: dict[str, tuple[str, tuple[Hostile, ...]]] = {
    "unbounded while loop": (
        "test_an_unbounded_while_loop_is_refused",
        (
            Hostile(
                "lax.while_loop",
                "    x = lax.while_loop(jnp.all, jnp.ones_like, jnp.ones(2, jnp.int32))",
                r"lax\.while_loop is not an allowed function",
            ),
            Hostile("while True", "    while True:\n        pass", "While is not allowed"),
        ),
    ),
    "fori_loop with a traced bound": (
        "test_a_fori_loop_with_a_traced_bound_is_refused",
        (
            Hostile(
                "bound read from the state",
                "    n = s['food'][0, 0].astype(jnp.int32)\n"
                "    x = lax.fori_loop(0, n, jnp.maximum, 0)",
                "line 3: has a loop whose trip count is not a static constant",
            ),
        ),
    ),
    "huge fori_loop / scan": (
        "test_a_huge_fori_loop_is_refused",
        (
            Hostile(
                "fori_loop of 10**6 steps",
                "    x = lax.fori_loop(0, 1000000, jnp.maximum, 0)",
                "line 2: has a loop of 1000000 steps",
            ),
        ),
    ),
    "work not bounded by the input and output": (
        "test_work_not_bounded_by_the_input_and_output_is_refused",
        (
            Hostile(
                "matmul chain",
                "    a = jnp.ones((1000, 1000))\n    b = jnp.dot(jnp.dot(a, a), a)",
                r"line 3: would cost about 4e\+09 operations per call",
            ),
            Hostile(
                "outer product",
                "    x = jnp.arange(1000) * 1.0\n    o = jnp.einsum('i,j->ij', x, x)",
                "operations per call",
            ),
            Hostile(
                "sort of a made-up array",
                "    x = jnp.sort(jnp.ones(1000000))",
                "operations per call",
            ),
            # XLA's cost analysis counts the body once (1e4 operations, under the limit);
            # the jaxpr walk counts it once per step
            Hostile(
                "loop over a made-up array",
                "    x = lax.fori_loop(0, 64, jnp.maximum, jnp.ones((100, 100)))",
                "operations per call",
            ),
        ),
    ),
    "power towers and exploding constants": (
        "test_power_towers_and_exploding_constants_are_refused",
        (
            Hostile("10**10**10", "    x = 10**10**10", "constant exponent of at most 8"),
            Hostile("2**(2**40)", "    x = 2**(2**40)", "constant exponent of at most 8"),
            Hostile("(10**7)**8", "    x = (10**7)**8", r"10000000\*\*8 is too large"),
            Hostile(
                "product of named constants",
                "    n = 10**7\n    x = n * n * n",
                r"evaluates to 1e\+21",
            ),
        ),
    ),
    "string and list repetition": (
        "test_string_and_list_repetition_is_refused",
        (
            Hostile(
                "'a' * 10**12",
                "    x = 'a' * (10**6 * 10**6)",
                "repeats a string to 1000000000000 characters",
            ),
            Hostile(
                "[0] * 10**12",
                "    x = [0] * (10**6 * 10**6)",
                "sequence of 1000000000000 items",
            ),
            Hostile(
                "nested lists made an array",
                "    x = jnp.array([[0] * 10000] * 10000)",
                "sequence of 100000000 items",
            ),
            Hostile(
                "joined strings",
                "    a = 'ab' * 5000\n    b = a + a",
                "joins strings to 20000 characters",
            ),
        ),
    ),
    "huge range": (
        "test_a_huge_range_is_refused",
        (
            Hostile(
                "for over range(10**6)",
                "    for i in range(10**6):\n        pass",
                "loop of 1000000 steps",
            ),
            Hostile(
                "max(range(10**14))",
                "    x = max(range(10**7 * 10**7))",
                r"range\(\.\.\.\) needs constant bounds",
            ),
            Hostile(
                "jnp.array(range(10**6))",
                "    x = jnp.array(range(1000000))",
                r"range\(\.\.\.\) needs constant bounds",
            ),
            Hostile(
                "three nested loops of 64",
                "    x = s['food']\n    for i in range(64):\n        for j in range(64):\n"
                "            for k in range(64):\n                x = x + 1.0",
                "nested loops of 262144 steps",
            ),
        ),
    ),
    "recursion and deep nesting": (
        "test_recursion_and_deep_nesting_are_refused",
        (
            Hostile(
                "calls itself",
                "    x = planning_function(s)",
                "calling 'planning_function' is not allowed",
            ),
            Hostile(
                "passes itself to a loop",
                "    x = lax.fori_loop(0, 2, planning_function, s)",
                "unknown name 'planning_function'",
            ),
            Hostile("5000 nested minus signs", "    x = " + "-" * 5000 + "1", "nested too deeply"),
        ),
    ),
    "comprehensions": (
        "test_comprehensions_are_refused",
        (
            Hostile("list", "    x = [i for i in range(10**9)]", "ListComp is not allowed"),
            Hostile("generator", "    x = max(i for i in range(10**9))", "GeneratorExp"),
        ),
    ),
    "Python work no syntax check sees": (
        "test_python_work_no_syntax_check_sees_is_cut_off_by_the_child_limits",
        (
            Hostile(
                "integer squared in a loop",
                "    x = 10000000\n    for i in range(40):\n        x = x * x",
                r"exceeded \d+ s of CPU while tracing",
                needs_child=True,
            ),
            Hostile(
                "list doubled in a loop",
                "    x = [0]\n    for i in range(40):\n        x = x + x",
                # memory or CPU, whichever limit the child reaches first
                r"exceeded (the memory limit of 1024 MiB|\d+ s of CPU) while tracing",
                limits=(("trace_memory_bytes", 1 << 30),),
                needs_child=True,
            ),
        ),
    ),
}


def refuse(case: Hostile, isolate: bool = True, **limit_overrides):
    """``(reason, wall seconds, CPU seconds of this process and its children)`` of
    compiling ``case``; the reason is ``ACCEPTED`` if it compiles."""
    from jaxmarl_llm.methods.yolo.sandbox import SandboxLimits, UnsafeCode, compile_function

    limits = SandboxLimits(**{**dict(case.limits), **limit_overrides})
    cpu0 = _cpu_seconds()
    start = time.perf_counter()
    try:
        compile_function(
            case.source,
            "planning_function",
            (STATE,),
            OUT_SHAPE,
            constants=CONSTANTS,
            limits=limits,
            isolate=isolate,
        )
    except UnsafeCode as e:
        return str(e), time.perf_counter() - start, _cpu_seconds() - cpu0
    return ACCEPTED, time.perf_counter() - start, _cpu_seconds() - cpu0


def reference_functions() -> list[tuple]:
    """(label, source, function name, sample args, n agents, out kind, constants) of every
    planning and reward function the project compiles: each env's reference plan, the
    plans kept in the results folders and the paper's reward function (appendix E)."""
    import envs
    from jaxmarl_llm.methods.yolo.answers import parse_python_block
    from jaxmarl_llm.methods.yolo.shaper import env_tasks, split_functions

    results = REPO / "experiments/results/yolo"
    paper = (REPO / "experiments/yolo_answers/lbf_paper_reward_iteration1.md").read_text()
    rows = []
    for env_name, kept in (
        ("lbf:8x8-2p-2f-coop", "yolo_lbf"),
        ("mpe:simple_spread_3", "yolo_spread_3"),
        ("mpe:simple_spread_4", "yolo_spread_4"),
        ("smax:3m", "yolo_smax_3m"),
    ):
        aenv = envs.make_array_env(env_name)
        tasks = env_tasks(aenv)
        # shapes and dtypes are all a trace needs
        _, sample = jax.eval_shape(aenv.env.reset, jax.random.PRNGKey(0))
        view = jax.eval_shape(tasks.interpret, sample)
        n = aenv.num_agents
        ints = jax.ShapeDtypeStruct((n,), jnp.int32)
        sources = {f"{env_name} reference": tasks.reference}
        for path in sorted(results.glob(f"{kept}*/planning_function.py")):
            sources[str(path.relative_to(REPO))] = path.read_text()
        if kept == "yolo_lbf":
            sources["paper reward (appendix E)"] = parse_python_block(paper, "compute_reward")
        for label, source in sources.items():
            parts = split_functions(source)
            for name, args, kind in (
                ("planning_function", (view,), "i"),
                ("compute_reward", (view, ints, ints), "f"),
            ):
                if name in parts:
                    rows.append(
                        (f"{label}: {name}", parts[name], name, args, n, kind, tasks.constants)
                    )
    return rows


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("experiments/results/yolo"))
    args = parser.parse_args(argv)
    rows = []
    for category, (test, cases) in HOSTILE_CODE.items():
        for case in cases:
            reason, wall, cpu = refuse(case)
            rows.append(
                {
                    "category": category,
                    "case": case.name,
                    "test": test,
                    "reason": reason,
                    "wall_s": round(wall, 3),
                    "cpu_s": round(cpu, 3),
                }
            )
            print(f"{category:42s} {case.name:30s} {wall:6.2f} s wall {cpu:6.2f} s CPU  {reason}")
    references = reference_costs()
    load = os.getloadavg()[0]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sandbox_refusals.json").write_text(
        json.dumps(
            {"load_average_1min": load, "rows": rows, "reference_functions": references},
            indent=2,
        )
        + "\n"
    )
    lines = [
        "| category | case | refused because | wall s | CPU s |",
        "|---|---|---|---|---|",
        *(
            f"| {r['category']} | {r['case']} | {r['reason'].replace('|', '/')} | "
            f"{r['wall_s']:.2f} | {r['cpu_s']:.2f} |"
            for r in rows
        ),
    ]
    lines += [
        "",
        "| reference function | input+output elements | operations / element | bytes / element |",
        "|---|---|---|---|",
        *(
            f"| {r['function']} | {r['elements']} | {r['flops_per_element']:.1f} | "
            f"{r['bytes_per_element']:.1f} |"
            for r in references
        ),
    ]
    (args.out / "sandbox_refusals.md").write_text("\n".join(lines) + "\n")
    return rows


def reference_costs() -> list[dict]:
    """Estimated cost per call of every reference function, per input/output element
    (the unit of the limits ``max_flops_per_element`` / ``max_bytes_per_element``)."""
    from jaxmarl_llm.methods.yolo.sandbox import estimated_cost

    out = []
    for label, source, name, args, _, _, constants in reference_functions():
        flops, moved, elements = estimated_cost(source, name, args, constants=constants)
        out.append(
            {
                "function": label,
                "elements": elements,
                "flops_per_element": round(flops / elements, 2),
                "bytes_per_element": round(moved / elements, 2),
            }
        )
        print(f"{label:90s} {flops / elements:8.1f} ops {moved / elements:8.1f} bytes per element")
    return out


if __name__ == "__main__":
    main()
