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
3. **Constants**: no ``**`` with an exponent above 8 and no integer literal above 10**7,
   so Python cannot be asked to build a huge number before JAX sees it.
4. **Run** the compiled module in a namespace holding only those names (the ``jnp`` and
   ``lax`` there are namespaces of the allowed functions, not the modules, and
   ``__builtins__`` holds the five allowed builtins), so a check the walk missed still
   finds nothing to reach.
5. **Trace** it on a sample input with ``jax.make_jaxpr``, first in a separate process
   with a wall-clock limit and a memory limit (Python-level arithmetic in a bounded loop
   can still build gigantic integers, which no syntax check can rule out), then here:
   Python errors (e.g. an ``if`` on a traced value) are reported; the program may have
   at most ``max_equations`` operations, no intermediate array above ``max_elements``
   (no huge allocations), and must return the declared shape and dtype kind.

Any refusal raises :class:`UnsafeCode` with the reason and line, which the caller can
feed back to the model for another attempt (:func:`compile_with_retries`).
"""

from __future__ import annotations

import ast
import dataclasses
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


class UnsafeCode(ValueError):
    """Generated code was refused; ``reason`` says why (and where)."""

    def __init__(self, reason: str, line: int | None = None):
        self.reason, self.line = reason, line
        super().__init__(f"line {line}: {reason}" if line else reason)


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    max_loop: int = 64  # largest constant bound of a ``for ... in range(...)``
    max_equations: int = 20_000  # operations in the traced program
    max_elements: int = 1_000_000  # largest intermediate array
    trace_seconds: float = 60.0  # wall clock of the isolated trace (process start included)
    trace_memory_bytes: int = 4 << 30  # address-space limit of the isolated trace


def _namespace(helpers: Mapping[str, Any], constants: Mapping[str, Any]) -> dict:
    """The only names the code can reach."""
    jnp_ns = types.SimpleNamespace(**{n: getattr(jnp, n) for n in JNP_FUNCTIONS})
    jnp_ns.linalg = types.SimpleNamespace(norm=jnp.linalg.norm)
    lax_ns = types.SimpleNamespace(**{n: getattr(jax.lax, n) for n in LAX_FUNCTIONS})
    return {"__builtins__": dict(BUILTINS), "jnp": jnp_ns, "lax": lax_ns, **helpers, **constants}


class _Checker(ast.NodeVisitor):
    def __init__(self, name: str, known: set[str], limits: SandboxLimits):
        self.name, self.known, self.limits = name, known, limits
        self.assigned: set[str] = set()
        self.functions = 0

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
        elif not isinstance(f, ast.Attribute):
            self.fail(node, "only named functions and methods may be called")
        self.generic_visit(node)

    def visit_For(self, node):
        it = node.iter
        ok = (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id == "range"
            and not it.keywords
            and 1 <= len(it.args) <= 3
            and all(_int_constant(a, self.known_values) is not None for a in it.args)
        )
        if not ok:
            self.fail(node, "loops must be `for i in range(N)` with a constant N")
        bounds = [_int_constant(a, self.known_values) for a in it.args]
        if len(range(*bounds)) > self.limits.max_loop:
            self.fail(node, f"loop of {len(range(*bounds))} steps (at most {self.limits.max_loop})")
        if node.orelse:
            self.fail(node, "for-else is not allowed")
        self.generic_visit(node)

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, bool | float | type(None)):
            return
        if isinstance(v, int):
            if abs(v) > MAX_LITERAL:
                self.fail(node, f"integer literal {v} is too large")
            return
        if isinstance(v, str) and len(v) <= 10_000:
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
            if isinstance(node.left, ast.Constant | ast.BinOp):
                self.fail(node, "** of a constant expression is not allowed")
        self.generic_visit(node)

    def _check_name(self, node, name: str):
        if name.startswith("_"):
            self.fail(node, f"names starting with '_' are not allowed ({name!r})")

    known_values: Mapping[str, Any] = {}


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _int_constant(node: ast.AST, known: Mapping[str, Any]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name) and isinstance(known.get(node.id), int):
        return known[node.id]
    return None


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
    helpers, constants = dict(helpers or {}), dict(constants or {})
    known = set(BUILTINS) | {"jnp", "lax"} | set(helpers) | set(constants)
    checker = _Checker(name, known, limits)
    checker.known_values = constants
    checker.visit(tree)
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


def _trace_and_check(source, name, sample_args, out_shape, out_kind, helpers, constants, limits):
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
        raise UnsafeCode("ran out of memory while tracing") from None
    except Exception as e:  # any Python error while tracing is the code's fault
        raise UnsafeCode(f"fails when traced: {type(e).__name__}: {e}") from None
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
    return fn


def _trace_isolated(spec, limits: SandboxLimits) -> None:
    """Run the trace in a fresh interpreter (``python -m ...sandbox``, so the caller's
    main module is never re-imported) with a time and an address-space limit."""
    import pickle
    import subprocess
    import sys

    payload = pickle.dumps((spec, limits.trace_memory_bytes))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "jaxmarl_llm.methods.yolo.sandbox"],
            input=payload,
            capture_output=True,
            timeout=limits.trace_seconds,
        )
    except subprocess.TimeoutExpired:
        raise UnsafeCode(f"did not finish tracing within {limits.trace_seconds:.0f} s") from None
    marker = b"\nSANDBOX-RESULT:"
    if marker not in proc.stdout:
        raise UnsafeCode(
            f"crashed while tracing (exit code {proc.returncode}; memory limit "
            f"{limits.trace_memory_bytes >> 20} MiB)"
        )
    error = pickle.loads(proc.stdout.rsplit(marker, 1)[1])
    if error is not None:
        raise UnsafeCode(error)


def _child_main() -> None:
    import pickle
    import resource
    import sys

    spec, memory_bytes = pickle.loads(sys.stdin.buffer.read())
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    try:
        _trace_and_check(*spec)
        error = None
    except UnsafeCode as e:
        error = str(e)
    except MemoryError:
        error = f"ran out of memory while tracing (limit {memory_bytes >> 20} MiB)"
    sys.stdout.buffer.write(b"\nSANDBOX-RESULT:" + pickle.dumps(error))
    sys.stdout.flush()


def _subjaxprs(jaxpr):
    for eqn in jaxpr.eqns:
        for v in eqn.params.values():
            for sub in v if isinstance(v, tuple | list) else (v,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield inner


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


if __name__ == "__main__":
    _child_main()
