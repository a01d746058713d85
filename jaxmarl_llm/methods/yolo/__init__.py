"""YOLO-MARL: one-time LLM planning functions compiled safely to JAX (work in progress:
the sandbox that turns generated code into a checked pure function)."""

from jaxmarl_llm.methods.yolo.sandbox import (
    SandboxLimits,
    UnsafeCode,
    check_source,
    compile_function,
    compile_with_retries,
)

__all__ = [
    "SandboxLimits",
    "UnsafeCode",
    "check_source",
    "compile_function",
    "compile_with_retries",
]
