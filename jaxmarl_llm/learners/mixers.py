"""Value-decomposition mixers: per-agent utilities ``[..., N]`` -> team value ``[...]``.

Every mixer is a flax module called as ``mixer(agent_qs [..., N], state [..., S])``;
mixers that ignore the state (VDN) still take it so the learner treats them alike.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.initializers import constant

from jaxmarl_llm.learners.initializers import orthogonal

MIXER_NAMES = ("qmix", "vdn")


class VDNMixer(nn.Module):
    """Value decomposition networks (Sunehag et al., 2018): ``Q_tot = sum_i Q_i``."""

    @nn.compact
    def __call__(self, agent_qs: jax.Array, state: jax.Array) -> jax.Array:
        return agent_qs.sum(-1)


def _hypernet(out_dim: int, hidden_dim: int, scale: float, name: str) -> nn.Module:
    def dense(d):
        return nn.Dense(d, kernel_init=orthogonal(scale), bias_init=constant(0.0))

    return nn.Sequential([dense(hidden_dim), nn.relu, dense(out_dim)], name=name)


class QMixer(nn.Module):
    """QMIX (Rashid et al., 2018): a two-layer mixing network whose weights come from
    hypernetworks of the world state. Absolute-valued weights make ``Q_tot`` monotonic
    in every ``Q_i``; biases (and the state value ``V(s)``) are unconstrained.

    All hypernetwork kernels start orthogonal with gain ``init_scale`` (as in JaxMARL),
    so ``Q_tot`` starts near 0 whatever the scale of the state.
    """

    embed_dim: int = 32
    hypernet_dim: int = 64
    init_scale: float = 0.001

    @nn.compact
    def __call__(self, agent_qs: jax.Array, state: jax.Array) -> jax.Array:
        n, scale = agent_qs.shape[-1], self.init_scale
        state = jnp.broadcast_to(state, (*agent_qs.shape[:-1], state.shape[-1]))
        w1 = jnp.abs(_hypernet(n * self.embed_dim, self.hypernet_dim, scale, "hyper_w1")(state))
        w1 = w1.reshape(*agent_qs.shape[:-1], n, self.embed_dim)
        b1 = nn.Dense(self.embed_dim, kernel_init=orthogonal(scale), name="hyper_b1")(state)
        hidden = nn.elu(jnp.einsum("...n,...ne->...e", agent_qs, w1) + b1)
        w2 = jnp.abs(_hypernet(self.embed_dim, self.hypernet_dim, scale, "hyper_w2")(state))
        v = _hypernet(1, self.embed_dim, scale, "hyper_v")(state)[..., 0]
        return jnp.einsum("...e,...e->...", hidden, w2) + v


def make_mixer(name: str, cfg=None) -> nn.Module:
    """The mixer called ``name`` (``qmix`` or ``vdn``); ``cfg`` supplies
    ``mixer_embed_dim``, ``mixer_hypernet_dim`` and ``mixer_init_scale`` (QMIX only;
    defaults when None).
    """
    name = str(getattr(name, "value", name))
    if name == "vdn":
        return VDNMixer()
    if name == "qmix":
        if cfg is None:
            return QMixer()
        return QMixer(
            embed_dim=int(cfg.mixer_embed_dim),
            hypernet_dim=int(cfg.mixer_hypernet_dim),
            init_scale=float(cfg.mixer_init_scale),
        )
    raise ValueError(f"unknown mixer {name!r}; valid: {', '.join(MIXER_NAMES)}")
