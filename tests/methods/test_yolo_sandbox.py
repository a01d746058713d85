"""The sandbox for model-written code: good planning functions compile to pure JAX,
hostile ones are refused with a reason."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmarl_llm.methods.yolo import (
    UnsafeCode,
    check_source,
    compile_function,
    compile_with_retries,
)

STATE = {"food": jnp.array([[1.0, 2.0], [4.0, 0.0]]), "agents": jnp.array([[0.0, 0.0], [5.0, 1.0]])}
CONSTANTS = {"NUM_AGENTS": 2, "TARGET_FOOD_0": 0, "TARGET_FOOD_1": 1}

GOOD = '''
def planning_function(processed_state):
    """Each agent targets the food nearest to it."""
    food = processed_state["food"]
    agents = processed_state["agents"]
    tasks = []
    for i in range(NUM_AGENTS):
        d = jnp.linalg.norm(food - agents[i], axis=-1)
        tasks.append(jnp.where(d[0] <= d[1], TARGET_FOOD_0, TARGET_FOOD_1))
    return {"agent_0": tasks[0], "agent_1": tasks[1]}
'''


def _compile(source, isolate=False, **kw):
    return compile_function(
        source,
        "planning_function",
        (STATE,),
        out_shape=(2,),
        constants=CONSTANTS,
        isolate=isolate,
        **kw,
    )


def test_a_good_planning_function_compiles_to_a_pure_jittable_function():
    fn = _compile(GOOD, isolate=True)
    np.testing.assert_array_equal(fn(STATE), [0, 1])
    swapped = {"food": STATE["food"][::-1], "agents": STATE["agents"]}
    batched = jax.jit(jax.vmap(fn))(jax.tree.map(lambda a, b: jnp.stack([a, b]), STATE, swapped))
    np.testing.assert_array_equal(batched, [[0, 1], [1, 0]])


HOSTILE = {
    "import": (
        "import os\ndef planning_function(s):\n    return jnp.zeros(2, jnp.int32)",
        "top level",
    ),
    "import inside": (
        "def planning_function(s):\n    import os\n    return jnp.zeros(2, jnp.int32)",
        "Import",
    ),
    "dunder walk": (
        "def planning_function(s):\n    c = s.__class__.__mro__\n"
        "    return jnp.zeros(2, jnp.int32)",
        "starting with '_'",
    ),
    "open": (
        "def planning_function(s):\n    open('/etc/passwd')\n    return jnp.zeros(2, jnp.int32)",
        "calling 'open' is not allowed",
    ),
    "eval": ("def planning_function(s):\n    return eval('1')", "calling 'eval'"),
    "getattr": (
        "def planning_function(s):\n    return getattr(jnp, 'load')('x')",
        "only named functions",
    ),
    "jnp.load": ("def planning_function(s):\n    return jnp.load('x.npy')", "jnp.load"),
    "while": (
        "def planning_function(s):\n    while True:\n        pass\n"
        "    return jnp.zeros(2, jnp.int32)",
        "While",
    ),
    "long loop": (
        "def planning_function(s):\n    for i in range(10**6):\n        pass\n"
        "    return jnp.zeros(2, jnp.int32)",
        "loop of 1000000 steps",
    ),
    "loop over data": (
        "def planning_function(s):\n    for x in s['food']:\n        pass\n"
        "    return jnp.zeros(2, jnp.int32)",
        "loops must be",
    ),
    "recursion": ("def planning_function(s):\n    return planning_function(s)", "calling"),
    "lambda": ("def planning_function(s):\n    f = lambda x: x\n    return f(s)", "Lambda"),
    "power tower": ("def planning_function(s):\n    x = 10**8**8\n    return x", "exponent"),
    "big literal": (
        "def planning_function(s):\n    return jnp.zeros(123456789012, jnp.int32)",
        "too large",
    ),
    "global": (
        "def planning_function(s):\n    global jnp\n    return jnp.zeros(2, jnp.int32)",
        "Global",
    ),
    "two functions": (
        "def helper(x):\n    return x\ndef planning_function(s):\n    return helper(s)",
        "exactly one function",
    ),
    "top-level code": (
        "x = 1\ndef planning_function(s):\n    return jnp.zeros(2, jnp.int32)",
        "top level",
    ),
    "reassign jnp": (
        "def planning_function(s):\n    jnp = 1\n    return jnp",
        "cannot be reassigned",
    ),
    "format string": (
        "def planning_function(s):\n    x = f'{s}'\n    return jnp.zeros(2, jnp.int32)",
        "JoinedStr",
    ),
    "comprehension": (
        "def planning_function(s):\n    return jnp.array([i for i in range(2)])",
        "ListComp",
    ),
    "try": (
        "def planning_function(s):\n    try:\n        pass\n    except Exception:\n        pass\n"
        "    return jnp.zeros(2, jnp.int32)",
        "Try",
    ),
    "syntax": ("def planning_function(s)\n    return 1", "does not parse"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_code_is_refused_before_it_runs(case):
    source, reason = HOSTILE[case]
    with pytest.raises(UnsafeCode, match=reason):
        check_source(source, "planning_function", constants=CONSTANTS)


@pytest.mark.parametrize(
    "source, reason",
    [
        ("def planning_function(s):\n    return jnp.zeros(3, jnp.int32)", r"shape \(3,\)"),
        ("def planning_function(s):\n    return jnp.zeros(2)", "dtype float32"),
        (
            "def planning_function(s):\n    if s['food'][0, 0] > 1:\n"
            "        return jnp.zeros(2, jnp.int32)\n    return jnp.ones(2, jnp.int32)",
            "use jnp.where",
        ),
        (
            "def planning_function(s):\n    x = jnp.zeros((10000, 10000))\n"
            "    return jnp.zeros(2, jnp.int32) + x.sum().astype(jnp.int32)",
            "array of 100000000 elements",
        ),
        ("def planning_function(s):\n    return s['missing']", "KeyError"),
    ],
    ids=["wrong shape", "wrong dtype", "python if on a tracer", "huge array", "key error"],
)
def test_code_that_passes_the_walk_is_checked_when_traced(source, reason):
    with pytest.raises(UnsafeCode, match=reason):
        _compile(source)


def test_refusals_are_fed_back_until_the_code_is_acceptable():
    answers = iter(["def planning_function(s):\n    import os", GOOD])
    asked_with = []

    def ask(previous_error):
        asked_with.append(previous_error)
        return next(answers)

    fn, source, errors = compile_with_retries(ask, _compile, attempts=3)
    assert source == GOOD and len(errors) == 1 and "Import" in errors[0]
    assert asked_with == [None, errors[0]]
    with pytest.raises(UnsafeCode, match="no acceptable code in 2 attempts"):
        compile_with_retries(lambda e: "def planning_function(s):\n    open('x')", _compile, 2)


def test_the_reference_lbf_plan_compiles_and_its_tasks_lead_to_the_food():
    """The scripted backend's LBF planning function goes through the sandbox; following
    its tasks greedily collects all food of a hand-built state."""
    import envs
    from envs.lbf import EAST, LOAD, NORTH, SOUTH, WEST, LBFState
    from jaxmarl_llm.methods.yolo.lbf import (
        REFERENCE_PLANNING_FUNCTION,
        action_matches,
        make_interpret,
        task_constants,
    )

    env = envs.make("lbf:8x8-2p-2f-coop")
    interpret = make_interpret(env.grid_size)
    state = LBFState(
        agent_pos=jnp.array([[1, 1], [6, 6]], jnp.int32),
        agent_level=jnp.array([1, 1], jnp.int32),
        food_pos=jnp.array([[3, 3], [5, 2]], jnp.int32),
        food_level=jnp.array([2, 2], jnp.int32),
        food_alive=jnp.array([True, True]),
        step=jnp.zeros((), jnp.int32),
    )
    plan = compile_function(
        REFERENCE_PLANNING_FUNCTION,
        "planning_function",
        (interpret(state),),
        out_shape=(2,),
        constants=task_constants(2),
    )
    moves = jnp.array([NORTH, SOUTH, WEST, EAST, LOAD])

    @jax.jit
    def greedy_step(s):
        tasks = plan(interpret(s))
        # the first candidate action that matches each agent's task
        ok = jax.vmap(lambda a: action_matches(s, tasks, jnp.full((2,), a)))(moves)  # [5, N]
        actions = moves[jnp.argmax(ok, 0)]
        _, s2, r, d, _ = env.step_env(
            jax.random.PRNGKey(0), s, {"agent_0": actions[0], "agent_1": actions[1]}
        )
        return s2, r["agent_0"] + r["agent_1"], tasks

    total = 0.0
    for _ in range(30):
        state, r, tasks = greedy_step(state)
        total += float(r)
        if not bool(state.food_alive.any()):
            break
    assert not bool(state.food_alive.any()) and abs(total - 1.0) < 1e-6
