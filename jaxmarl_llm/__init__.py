"""jaxmarl_llm: cooperative MARL in JAX, rewards and guidance from language and vision models."""

from jaxmarl_llm import xla_defaults as _xla_defaults

_xla_defaults.apply()  # before JAX starts its backend (see the module)

__version__ = "0.1.0"
