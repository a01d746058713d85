"""Compile untrusted, model-written Python into a pure JAX function, or refuse it.

YOLO-MARL asks a language model once for a planning function (and, in an ablation, a
reward function) and then calls it inside the jitted training scan. The code comes from
a model, so it is treated as hostile input:

1. **Parse** with ``ast`` and walk every node. Only a whitelist of node types passes:
   arithmetic, comparisons, boolean logic, conditional expressions, assignments,
   subscripts, tuples/lists/dicts, calls, ``if`` on Python values, and ``for`` over
   ``range`` with a small constant bound. Imports, ``while``, ``lambda``, nested
   functions, classes, ``global``/``nonlocal``, ``try``/``with``/``raise``, ``del``,
   ``yield``/``await``, f-strings and comprehensions are refused.
2. **Names**: no name or attribute may start with ``_`` (no ``__class__`` walks, no
   ``__globals__``), and every name read must be an argument, a local assignment, an
   allowed builtin (``range len min max abs``), ``jnp``/``lax``, a helper or a constant
   given by the caller. Calls go only to those (so no recursion: the function's own name
   is not callable). ``jnp.X``/``lax.X`` must be on an allow-list (no ``jnp.load``);
   attributes of values are limited to array basics (``shape``, ``at``, ``sum``, ...).
3. **Constants**: no ``**`` with an exponent above 8 and no integer literal above 10**7.
   Constant expressions (literals, the caller's constants, locals assigned once) are
   evaluated with bounds before Python would: an integer above 2**64, a string or
   list built by repetition or concatenation past 10,000 items, a ``range`` that is not
   constant and short, or nested loops of more than ``max_loop_steps`` steps are
   refused, so Python cannot be asked to build a huge value before JAX sees it.
4. **Run** the compiled module in a namespace holding only those names (the ``jnp`` and
   ``lax`` there are namespaces of the allowed functions, not the modules, and
   ``__builtins__`` holds the five allowed builtins), so a check the walk missed still
   finds nothing to reach.
5. **Trace** it on a sample input with ``jax.make_jaxpr``, first in a separate process
   with a CPU-time, a memory and a wall-clock limit (Python-level arithmetic in a bounded
   loop can still build gigantic integers, which no syntax check can rule out), then
   here: Python errors (e.g. an ``if`` on a traced value) are reported; the program may
   have at most ``max_equations`` operations, no intermediate array above
   ``max_elements`` (no huge allocations), and must return the declared shape and dtype
   kind.
6. **Bound the run-time cost**: the code runs at every training step, so what one call
   costs must scale with the state it reads and the tasks it returns. Loops whose trip
   count is not a static constant (``lax.fori_loop`` with a traced bound, a
   ``while_loop``) and ``lax.fori_loop``/scan loops of more than ``max_loop`` steps are
   refused; the operations and bytes moved per call, estimated from the jaxpr (a loop's
   body once per step) and by XLA's cost analysis of the lowered program (the larger of
   the two), may be at most ``max_flops_per_element`` / ``max_bytes_per_element`` times
   the number of input and output elements.

Any refusal raises :class:`UnsafeCode` with the reason and line, which the caller can
feed back to the model for another attempt (:func:`compile_with_retries`).
"""

from __future__ import annotations

import ast
import dataclasses
import operator
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

ALLOWED_NODES = (
    ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign,
    ast.AugAssign, ast.Expr, ast.Name, ast.Load, ast.Store, ast.Constant, ast.BinOp,
    ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.If, ast.For, ast.Call,
    ast.keyword, ast.Attribute, ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.Dict,
    ast.Pass, ast.Break, ast.Continue,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub,
    ast.UAdd, ast.Not, ast.Invert, ast.And, ast.Or, ast.BitAnd, ast.BitOr, ast.BitXor,
    ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot, ast.In,
    ast.NotIn,
)  # fmt: skip
BUILTINS = {"range": range, "len": len, "min": min, "max": max, "abs": abs}
JNP_FUNCTIONS = (
    "abs", "all", "any", "arange", "argmax", "argmin", "argsort", "array", "asarray",
    "clip", "concatenate", "cumsum", "float32", "full", "int32", "isclose", "linalg",
    "logical_and", "logical_not", "logical_or", "max", "maximum", "mean", "min", "minimum",
    "ones", "ones_like", "round", "sign", "sort", "sqrt", "square", "stack", "sum", "take",
    "where", "zeros", "zeros_like", "bool_", "int8", "float16", "equal", "not_equal",
    "less", "less_equal", "greater", "greater_equal", "exp", "log", "floor", "ceil",
    "expand_dims", "squeeze", "reshape", "transpose", "diag", "eye", "dot", "einsum",
    "count_nonzero", "nonzero", "unique",
)  # fmt: skip
LAX_FUNCTIONS = ("select", "cond", "switch", "fori_loop", "stop_gradient", "clamp")
VALUE_ATTRIBUTES = (
    "shape", "ndim", "dtype", "size", "T", "at", "set", "add", "get", "min", "max", "sum",
    "mean", "argmax", "argmin", "astype", "reshape", "any", "all", "norm", "real", "append",
)  # fmt: skip
MAX_LITERAL = 10**7
MAX_EXPONENT = 8
MAX_FOLDED = 2**64  # largest integer a constant expression may evaluate to
MAX_ITEMS = 10_000  # longest string, or list/tuple built by repetition or concatenation


class UnsafeCode(ValueError):
    """Generated code was refused; ``reason`` says why (and where)."""

    def __init__(self, reason: str, line: int | None = None):
        self.reason, self.line = reason, line
        super().__init__(f"line {line}: {reason}" if line else reason)


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    max_loop: int = 64  # most steps of one loop: ``for i in range(N)`` or lax.fori_loop
    max_loop_steps: int = 4096  # most steps of nested Python loops, trip counts multiplied
    max_equations: int = 20_000  # operations in the traced program
    max_elements: int = 1_000_000  # largest intermediate array
    max_flops_per_element: float = 10_000.0  # operations per call / input+output elements
    max_bytes_per_element: float = 100_000.0  # bytes moved per call / input+output elements
    trace_seconds: float = 60.0  # wall clock of the isolated trace (process start included)
    trace_cpu_seconds: float = 5.0  # CPU time of the isolated trace after its imports
    trace_memory_bytes: int = 4 << 30  # address-space limit of the isolated trace


def _namespace(helpers: Mapping[str, Any], constants: Mapping[str, Any]) -> dict:
    """The only names the code can reach."""
    jnp_ns = types.SimpleNamespace(**{n: getattr(jnp, n) for n in JNP_FUNCTIONS})
    jnp_ns.linalg = types.SimpleNamespace(norm=jnp.linalg.norm)
    lax_ns = types.SimpleNamespace(**{n: getattr(jax.lax, n) for n in LAX_FUNCTIONS})
    builtins = {**BUILTINS, "__import__": _import_loaded}
    return {"__builtins__": builtins, "jnp": jnp_ns, "lax": lax_ns, **helpers, **constants}


def _import_loaded(name, globals=None, locals=None, fromlist=(), level=0):
    """The ``__import__`` of the generated function's frame, for jax's C++ code, which
    looks numpy and ml_dtypes up from it the first time a function runs. The code itself
    cannot name it (no names starting with ``_``); it returns only those modules, loaded."""
    if level == 0 and name in ("numpy", "ml_dtypes") and name in sys.modules:
        return sys.modules[name]
    raise ImportError(f"generated code may not import {name!r}")


class _Checker(ast.NodeVisitor):
    def __init__(
        self, name: str, known: set[str], constants: Mapping[str, Any], limits: SandboxLimits
    ):
        self.name, self.known, self.constants, self.limits = name, known, constants, limits
        self.assigned: set[str] = set()
        self.fixed: dict[str, ast.expr] = {}  # locals assigned once: name -> value
        self.functions = 0
        self.loop_steps = 1  # steps of the loops around the node being visited, multiplied
        self.values: dict[int, Any] = {}  # id(node) -> folded value (memo)
        self.lengths: dict[int, int | None] = {}  # id(node) -> items built (memo)

    def fail(self, node: ast.AST, reason: str):
        raise UnsafeCode(reason, getattr(node, "lineno", None))

    def generic_visit(self, node):
        if not isinstance(node, ALLOWED_NODES):
            self.fail(node, f"{type(node).__name__} is not allowed in generated code")
        super().generic_visit(node)

    def visit_Module(self, node):
        for stmt in node.body:
            if not isinstance(stmt, ast.FunctionDef) and not _is_docstring(stmt):
                self.fail(stmt, "only function definitions may appear at the top level")
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        self.functions += 1
        if self.functions > 1 or node.name != self.name:
            self.fail(node, f"define exactly one function, named {self.name!r}")
        if node.decorator_list:
            self.fail(node, "decorators are not allowed")
        if node.returns or any(a.annotation for a in node.args.args):
            self.fail(node, "type annotations are not allowed")
        args = node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            self.fail(node, "use plain positional arguments only")
        for a in args.args:
            self._check_name(a, a.arg)
            self.assigned.add(a.arg)
        self.fixed = _assigned_once(node)
        for stmt in node.body:
            self.visit(stmt)

    def visit_Expr(self, node):
        if not (_is_docstring(node) or isinstance(node.value, ast.Call)):
            self.fail(node, "a bare expression does nothing")
        self.generic_visit(node)

    def visit_Name(self, node):
        self._check_name(node, node.id)
        if isinstance(node.ctx, ast.Store):
            if node.id in self.known:
                self.fail(node, f"{node.id!r} is a provided name and cannot be reassigned")
            self.assigned.add(node.id)
        elif node.id not in self.assigned and node.id not in self.known:
            self.fail(node, f"unknown name {node.id!r} (only arguments, locals and provided names)")

    def visit_Attribute(self, node):
        self._check_name(node, node.attr)
        base = node.value
        if isinstance(base, ast.Name) and base.id in ("jnp", "lax"):
            allowed = JNP_FUNCTIONS if base.id == "jnp" else LAX_FUNCTIONS
            if node.attr not in allowed:
                self.fail(node, f"{base.id}.{node.attr} is not an allowed function")
        elif (
            isinstance(base, ast.Attribute)
            and isinstance(base.value, ast.Name)
            and (base.value.id, base.attr) == ("jnp", "linalg")
        ):
            if node.attr != "norm":
                self.fail(node, f"jnp.linalg.{node.attr} is not an allowed function")
        elif node.attr not in VALUE_ATTRIBUTES:
            self.fail(node, f"attribute .{node.attr} is not allowed")
        self.generic_visit(node)

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Name):
            if f.id not in self.known:
                self.fail(node, f"calling {f.id!r} is not allowed (only jnp, lax, helpers)")
            if f.id == "range":
                steps = self._range_steps(node)
                if steps is None or steps > self.limits.max_loop:
                    self.fail(
                        node,
                        f"range(...) needs constant bounds of at most {self.limits.max_loop} "
                        "steps (jnp.arange builds index arrays)",
                    )
        elif not isinstance(f, ast.Attribute):
            self.fail(node, "only named functions and methods may be called")
        self.generic_visit(node)

    def visit_For(self, node):
        it = node.iter
        steps = self._range_steps(it) if isinstance(it, ast.Call) else None
        if steps is None:
            self.fail(node, "loops must be `for i in range(N)` with a constant N")
        if steps > self.limits.max_loop:
            self.fail(node, f"loop of {steps} steps (at most {self.limits.max_loop})")
        if node.orelse:
            self.fail(node, "for-else is not allowed")
        outer = self.loop_steps
        self.loop_steps = outer * max(steps, 1)
        if self.loop_steps > self.limits.max_loop_steps:
            self.fail(
                node,
                f"nested loops of {self.loop_steps} steps in all "
                f"(at most {self.limits.max_loop_steps})",
            )
        self.generic_visit(node)
        self.loop_steps = outer

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, bool | float | type(None)):
            return
        if isinstance(v, int):
            if abs(v) > MAX_LITERAL:
                self.fail(node, f"integer literal {v} is too large")
            return
        if isinstance(v, str) and len(v) <= MAX_ITEMS:
            return
        self.fail(node, f"constant of type {type(v).__name__} is not allowed")

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.Pow):
            exponent = node.right
            if not (
                isinstance(exponent, ast.Constant)
                and isinstance(exponent.value, int | float)
                and abs(exponent.value) <= MAX_EXPONENT
            ):
                self.fail(node, f"** needs a constant exponent of at most {MAX_EXPONENT}")
        self.fold(node)
        items = self.items(node)
        if items is not None and items > MAX_ITEMS:
            self.fail(
                node,
                f"builds a sequence of {items} items by repetition or concatenation "
                f"(at most {MAX_ITEMS}; jnp.zeros / jnp.full build arrays)",
            )
        self.generic_visit(node)

    def fold(self, node: ast.AST) -> Any:
        """The value of a constant expression (an int, float or str), or None when it is
        not one; refuses one whose value would be too large to build."""
        key = id(node)
        if key not in self.values:
            self.values[key] = None  # a local whose value reads itself is not constant
            self.values[key] = self._fold(node)
        return self.values[key]

    def _fold(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            v = node.value
            return v if isinstance(v, int | float | str) else None
        if isinstance(node, ast.Name):
            if isinstance(self.constants.get(node.id), int | float | str):
                return self.constants[node.id]
            return self.fold(self.fixed[node.id]) if node.id in self.fixed else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            v = self.fold(node.operand)
            if isinstance(v, int | float):
                return -v if isinstance(node.op, ast.USub) else v
            return None
        if not isinstance(node, ast.BinOp):
            return None
        left, right = self.fold(node.left), self.fold(node.right)
        if left is None or right is None:
            return None
        if isinstance(left, str) or isinstance(right, str):
            return self._fold_string(node, left, right)
        if isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int):
            if right > 0 and abs(left) > 1 and right * abs(left).bit_length() > 2 * 64:
                self.fail(node, f"constant expression {left}**{right} is too large")
        op = _ARITHMETIC.get(type(node.op))
        try:
            value = op(left, right) if op else None
        except (ArithmeticError, ValueError, TypeError):
            return None  # an error when run (division by zero, ...) is reported by the trace
        if isinstance(value, int) and abs(value) > MAX_FOLDED:
            self.fail(node, f"constant expression evaluates to {value:.3g} (at most 2**64)")
        return value

    def _fold_string(self, node, left, right) -> str | None:
        if isinstance(node.op, ast.Mult) and isinstance(left, str) != isinstance(right, str):
            text, count = (left, right) if isinstance(left, str) else (right, left)
            if not isinstance(count, int):
                return None
            if len(text) * count > MAX_ITEMS:
                self.fail(
                    node,
                    f"repeats a string to {len(text) * count} characters (at most {MAX_ITEMS})",
                )
            return text * count
        if isinstance(node.op, ast.Add) and isinstance(left, str) and isinstance(right, str):
            if len(left) + len(right) > MAX_ITEMS:
                self.fail(
                    node,
                    f"joins strings to {len(left) + len(right)} characters (at most {MAX_ITEMS})",
                )
            return left + right
        return None

    def items(self, node: ast.AST) -> int | None:
        """How many items a str/list/tuple expression builds (nested lists counted), or
        None when it is not known to be one."""
        key = id(node)
        if key not in self.lengths:
            self.lengths[key] = None
            self.lengths[key] = self._items(node)
        return self.lengths[key]

    def _element_items(self, node: ast.AST) -> int:
        """Items an element adds to a list (a nested list's own, as jnp.array reads it)."""
        if isinstance(node, ast.List | ast.Tuple) or (
            isinstance(node, ast.Name | ast.BinOp) and not isinstance(self.fold(node), str)
        ):
            return self.items(node) or 1
        return 1

    def _items(self, node: ast.AST) -> int | None:
        if isinstance(node, ast.List | ast.Tuple):
            return sum(self._element_items(e) for e in node.elts)
        value = self.fold(node)
        if isinstance(value, str):
            return len(value)
        if isinstance(node, ast.Name) and node.id in self.fixed:
            return self.items(self.fixed[node.id])
        if not isinstance(node, ast.BinOp):
            return None
        if isinstance(node.op, ast.Mult):
            for seq, count in ((node.left, node.right), (node.right, node.left)):
                n, times = self.items(seq), self.fold(count)
                if n is not None and isinstance(times, int):
                    return n * max(times, 0)
        if isinstance(node.op, ast.Add):
            a, b = self.items(node.left), self.items(node.right)
            if a is not None and b is not None:
                return a + b
        return None

    def _range_steps(self, call: ast.Call) -> int | None:
        """The length of ``range(...)`` with constant integer bounds, else None."""
        if not (
            isinstance(call.func, ast.Name)
            and call.func.id == "range"
            and not call.keywords
            and 1 <= len(call.args) <= 3
        ):
            return None
        bounds = [self.fold(a) for a in call.args]
        if not all(isinstance(b, int) for b in bounds):
            return None
        start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
        if step == 0:
            self.fail(call, "range() step must not be zero")
        return max(0, -((start - stop) // step))

    def _check_name(self, node, name: str):
        if name.startswith("_"):
            self.fail(node, f"names starting with '_' are not allowed ({name!r})")


_ARITHMETIC = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def _assigned_once(fn: ast.FunctionDef) -> dict[str, ast.expr]:
    """Locals stored exactly once, by a plain ``name = value``: their value is fixed."""
    stores: dict[str, int] = {a.arg: 1 for a in fn.args.args}
    values: dict[str, ast.expr] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stores[node.id] = stores.get(node.id, 0) + 1
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            values[node.targets[0].id] = node.value
    return {k: v for k, v in values.items() if stores.get(k) == 1}


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def check_source(
    source: str,
    name: str,
    helpers: Mapping[str, Any] | None = None,
    constants: Mapping[str, Any] | None = None,
    limits: SandboxLimits = SandboxLimits(),
) -> ast.Module:
    """Parse and walk ``source``; raise :class:`UnsafeCode` or return the tree."""
    if len(source) > 50_000:
        raise UnsafeCode(f"source of {len(source)} characters is too long")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as e:
        raise UnsafeCode(f"does not parse: {e}", getattr(e, "lineno", None)) from None
    except (RecursionError, MemoryError):
        raise UnsafeCode("is nested too deeply to parse") from None
    helpers, constants = dict(helpers or {}), dict(constants or {})
    known = set(BUILTINS) | {"jnp", "lax"} | set(helpers) | set(constants)
    checker = _Checker(name, known, constants, limits)
    try:
        checker.visit(tree)
    except RecursionError:
        raise UnsafeCode("is nested too deeply (expressions or blocks)") from None
    if checker.functions != 1:
        raise UnsafeCode(f"define exactly one function, named {name!r}")
    return tree


def compile_function(
    source: str,
    name: str,
    sample_args: tuple,
    out_shape: tuple[int, ...],
    out_kind: str = "i",
    helpers: Mapping[str, Any] | None = None,
    constants: Mapping[str, Any] | None = None,
    limits: SandboxLimits = SandboxLimits(),
    isolate: bool = True,
) -> Callable:
    """``source``'s function ``name`` as a traced-and-checked pure JAX function.

    ``out_kind`` is the numpy dtype kind of the result (``"i"`` integer task ids, ``"f"``
    rewards); a dict result (agent name -> value) is stacked in key order. Helpers must
    be picklable (module-level functions) when ``isolate`` is on.
    """
    check_source(source, name, helpers, constants, limits)
    spec = (source, name, sample_args, tuple(out_shape), out_kind, helpers, constants, limits)
    if isolate:
        _trace_isolated(spec, limits)
    return _trace_and_check(*spec)


def estimated_cost(
    source: str,
    name: str,
    sample_args: tuple,
    helpers: Mapping[str, Any] | None = None,
    constants: Mapping[str, Any] | None = None,
    limits: SandboxLimits = SandboxLimits(),
) -> tuple[float, float, int]:
    """``(operations, bytes moved, elements)`` of one call of the checked ``source``: what
    :func:`compile_function` compares with ``max_flops_per_element`` and
    ``max_bytes_per_element`` times ``elements`` (input and output elements)."""
    fn, closed = _trace(source, name, sample_args, helpers, constants, limits)
    out_shape = closed.out_avals[0].shape
    return (*_run_time_estimate(fn, closed, sample_args, limits), _elements(sample_args, out_shape))


def _trace(source, name, sample_args, helpers, constants, limits):
    """The checked source's function (a dict result stacked) and its jaxpr."""
    tree = check_source(source, name, helpers, constants, limits)
    namespace = _namespace(helpers or {}, constants or {})
    exec(compile(tree, f"<generated {name}>", "exec"), namespace)  # noqa: S102 (checked above)
    raw = namespace[name]

    def fn(*args):
        out = raw(*args)
        if isinstance(out, dict):
            out = jnp.stack([jnp.asarray(out[k]) for k in out])
        return jnp.asarray(out)

    try:
        closed = jax.make_jaxpr(fn)(*sample_args)
    except jax.errors.TracerBoolConversionError as e:
        raise UnsafeCode(
            "uses a traced value as a Python bool (an `if`/`and`/`or` on array values): "
            f"use jnp.where / jax.lax.select instead ({str(e).splitlines()[0]})"
        ) from None
    except MemoryError:
        raise  # the isolated trace reports its memory limit
    except Exception as e:  # any Python error while tracing is the code's fault
        raise UnsafeCode(f"fails when traced: {type(e).__name__}: {e}") from None
    return fn, closed


def _trace_and_check(source, name, sample_args, out_shape, out_kind, helpers, constants, limits):
    fn, closed = _trace(source, name, sample_args, helpers, constants, limits)
    eqns = _count_equations(closed.jaxpr)
    if eqns > limits.max_equations:
        raise UnsafeCode(f"traces to {eqns} operations (at most {limits.max_equations})")
    biggest = _largest_array(closed.jaxpr)
    if biggest > limits.max_elements:
        raise UnsafeCode(f"builds an array of {biggest} elements (at most {limits.max_elements})")
    out = closed.out_avals[0]
    if tuple(out.shape) != tuple(out_shape):
        raise UnsafeCode(f"returns shape {tuple(out.shape)}, expected {tuple(out_shape)}")
    kind = np.dtype(out.dtype).kind
    if out_kind == "i" and kind not in "iub" or out_kind == "f" and kind not in "fiub":
        raise UnsafeCode(f"returns dtype {out.dtype}, expected kind {out_kind!r}")
    _check_run_time_cost(fn, closed, sample_args, out_shape, limits)
    return fn


def _check_run_time_cost(fn, closed, sample_args, out_shape, limits: SandboxLimits) -> None:
    """Refuse loops without a small static trip count, and a call whose estimated work
    is not bounded by the size of what it reads and returns."""
    flops, moved = _run_time_estimate(fn, closed, sample_args, limits)
    elements = _elements(sample_args, out_shape)
    for which, (what, estimate, per_element) in enumerate(
        (
            ("operations", flops, limits.max_flops_per_element),
            ("bytes moved", moved, limits.max_bytes_per_element),
        )
    ):
        if estimate > per_element * elements:
            raise UnsafeCode(
                f"would cost about {estimate:.3g} {what} per call, more than "
                f"{per_element * elements:.3g} ({per_element:g} per element of the "
                f"{elements} it reads and returns), most of it on this line: the work must "
                "scale with the state it reads, not with arrays it makes up",
                _costliest_line(closed.jaxpr, limits, which),
            )


def _run_time_estimate(fn, closed, sample_args, limits: SandboxLimits) -> tuple[float, float]:
    """(operations, bytes moved) per call: the larger of the jaxpr walk's count and XLA's
    cost analysis of the lowered program."""
    flops, moved = _run_time_cost(closed.jaxpr, limits)
    try:
        xla = jax.jit(fn).lower(*sample_args).cost_analysis() or {}
    except Exception as e:  # it traced, so a failure here is the code's fault too
        raise UnsafeCode(f"fails when lowered: {type(e).__name__}: {e}") from None
    if isinstance(xla, list | tuple):  # one entry per device in some jax versions
        xla = xla[0] if xla else {}
    return max(flops, float(xla.get("flops", 0.0))), max(
        moved, float(xla.get("bytes accessed", 0.0))
    )


def _elements(sample_args, out_shape) -> int:
    inputs = sum(int(np.prod(np.shape(x))) for x in jax.tree.leaves(sample_args))
    return inputs + int(np.prod(out_shape))


def _run_time_cost(jaxpr, limits: SandboxLimits) -> tuple[float, float]:
    """(operations, bytes moved) of one run of ``jaxpr``, a loop's body counted once per
    step (XLA's cost analysis counts it once); refuses loops whose trip count is not a
    static constant of at most ``max_loop``."""
    costs = [_equation_run_time_cost(eqn, limits) for eqn in jaxpr.eqns]
    return sum(c[0] for c in costs), sum(c[1] for c in costs)


def _equation_run_time_cost(eqn, limits: SandboxLimits) -> tuple[float, float]:
    name = eqn.primitive.name
    if name == "while":
        raise UnsafeCode(
            "has a loop whose trip count is not a static constant (a lax.fori_loop with a "
            "traced bound, or a while_loop): loops must run a fixed, small number of steps",
            _generated_line(eqn),
        )
    costs = [_run_time_cost(sub, limits) for sub in _equation_subjaxprs(eqn)]
    if name == "scan":
        steps = eqn.params["length"]
        if steps > limits.max_loop:
            raise UnsafeCode(
                f"has a loop of {steps} steps (lax.fori_loop; at most {limits.max_loop})",
                _generated_line(eqn),
            )
        return steps * sum(c[0] for c in costs), steps * sum(c[1] for c in costs)
    if name == "cond":  # one branch runs
        return max(c[0] for c in costs), max(c[1] for c in costs)
    if costs:
        return sum(c[0] for c in costs), sum(c[1] for c in costs)
    return _equation_cost(eqn)


def _costliest_line(jaxpr, limits: SandboxLimits, which: int) -> int | None:
    """The line of the generated code whose operations (``which`` 0) or bytes moved (1)
    cost the most, so the refusal can point there."""
    by_line: dict[int | None, float] = {}
    for eqn in jaxpr.eqns:
        line = _generated_line(eqn)
        by_line[line] = by_line.get(line, 0.0) + _equation_run_time_cost(eqn, limits)[which]
    return max(by_line, key=by_line.get, default=None)


def _generated_line(eqn) -> int | None:
    """The line of the generated code an equation was traced from, where jax kept it."""
    try:
        from jax._src import source_info_util

        frame = source_info_util.user_frame(eqn.source_info.traceback)
    except Exception:  # a jax without this (private) helper: no line
        return None
    if frame is None or not frame.file_name.startswith("<generated"):
        return None
    return frame.start_line


def _equation_cost(eqn) -> tuple[float, float]:
    """(operations, bytes moved) of one primitive: a matrix product's multiply-adds, a
    sort's n log n comparisons, otherwise one operation per element in or out."""
    ins = [v.aval for v in eqn.invars if hasattr(v.aval, "shape")]
    outs = [v.aval for v in eqn.outvars if hasattr(v.aval, "shape")]

    def size(aval) -> int:
        return int(np.prod(aval.shape))

    moved = sum(size(a) * getattr(a.dtype, "itemsize", 4) for a in ins + outs)
    work = max(sum(size(a) for a in ins), sum(size(a) for a in outs), 1)
    if eqn.primitive.name == "dot_general":
        (contracting, _), _ = eqn.params["dimension_numbers"]
        depth = int(np.prod([ins[0].shape[d] for d in contracting]))
        work = 2 * size(outs[0]) * depth
    elif eqn.primitive.name == "sort":
        work *= max(1.0, np.log2(work))
    return float(work), float(moved)


# The child loads this file alone: importing the package would import every method and
# environment (seconds of CPU before the trace starts).
_CHILD_START = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("yolo_sandbox_child", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
module._child_main()
"""
_CHILD_MARKER = b"\nSANDBOX-RESULT:"


def _trace_isolated(spec, limits: SandboxLimits) -> None:
    """Run the trace in a fresh interpreter on the CPU with a CPU-time, an address-space
    and a wall-clock limit; its refusal (or its death) becomes an :class:`UnsafeCode`."""
    import os
    import pickle
    import signal
    import subprocess

    source, name, sample_args, out_shape, out_kind, helpers, constants, _ = spec
    plain_args = jax.tree.map(
        lambda x: np.asarray(x) if isinstance(x, jax.Array) else x, sample_args
    )
    payload = pickle.dumps(
        (
            (source, name, plain_args, out_shape, out_kind, helpers, constants),
            dataclasses.asdict(limits),
        )
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD_START, __file__],
            input=payload,
            capture_output=True,
            timeout=limits.trace_seconds,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
    except subprocess.TimeoutExpired:
        raise UnsafeCode(f"did not finish tracing within {limits.trace_seconds:g} s") from None
    if _CHILD_MARKER in proc.stdout:
        error = pickle.loads(proc.stdout.rsplit(_CHILD_MARKER, 1)[1])
        if error is not None:
            raise UnsafeCode(error)
        return
    if proc.returncode == -signal.SIGXCPU:
        raise UnsafeCode(f"exceeded {limits.trace_cpu_seconds:g} s of CPU while tracing")
    raise UnsafeCode(
        f"crashed while tracing (exit code {proc.returncode}; limits: "
        f"{limits.trace_cpu_seconds:g} s of CPU, {limits.trace_memory_bytes >> 20} MiB of memory)"
    )


def _child_main() -> None:
    import math
    import pickle
    import resource

    spec, limits = pickle.loads(sys.stdin.buffer.read())
    limits = SandboxLimits(**limits)
    memory = limits.trace_memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    # SIGXCPU at the soft limit (the imports so far not counted), SIGKILL a second later
    used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    cpu = math.ceil(used + limits.trace_cpu_seconds)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        _trace_and_check(*spec, limits)
        error = None
    except UnsafeCode as e:
        error = str(e)
    except MemoryError:
        error = f"exceeded the memory limit of {memory >> 20} MiB while tracing"
    except RecursionError:
        error = "recursed too deeply while tracing"
    sys.stdout.buffer.write(_CHILD_MARKER + pickle.dumps(error))
    sys.stdout.flush()


def _equation_subjaxprs(eqn):
    for v in eqn.params.values():
        for sub in v if isinstance(v, tuple | list) else (v,):
            inner = getattr(sub, "jaxpr", sub)
            if hasattr(inner, "eqns"):
                yield inner


def _subjaxprs(jaxpr):
    for eqn in jaxpr.eqns:
        yield from _equation_subjaxprs(eqn)


def _count_equations(jaxpr) -> int:
    return len(jaxpr.eqns) + sum(_count_equations(s) for s in _subjaxprs(jaxpr))


def _largest_array(jaxpr) -> int:
    sizes = [
        int(np.prod(v.aval.shape))
        for eqn in jaxpr.eqns
        for v in eqn.outvars
        if hasattr(v.aval, "shape")
    ]
    sizes += [_largest_array(s) for s in _subjaxprs(jaxpr)]
    return max(sizes, default=0)


def compile_with_retries(
    ask: Callable[[str | None], str],
    compile_source: Callable[[str], Callable],
    attempts: int = 3,
) -> tuple[Callable, str, list[str]]:
    """Ask for code (``ask(previous_error)`` returns source), compile it, and on a
    refusal ask again with the reason, up to ``attempts`` times. Returns the function,
    its source and the refusals; raises :class:`UnsafeCode` naming every refusal."""
    errors: list[str] = []
    for _ in range(attempts):
        source = ask(errors[-1] if errors else None)
        try:
            return compile_source(source), source, errors
        except UnsafeCode as e:
            errors.append(str(e))
    raise UnsafeCode(f"no acceptable code in {attempts} attempts: " + " | ".join(errors))
