"""jaxmarl_llm: cooperative MARL in JAX, rewards and guidance from language and vision models."""

__version__ = "0.1.0"
