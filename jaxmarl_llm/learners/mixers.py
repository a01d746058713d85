"""Value-decomposition mixers: per-agent utilities ``[..., N]`` -> team value ``[...]``.

Every mixer is a flax module called as ``mixer(agent_qs [..., N], state [..., S],
max_qs [..., N], actions [..., N, A])`` (``max_qs``: each agent's greedy utility,
``actions``: the one-hot joint action); mixers that ignore some inputs (VDN the state,
QMIX the greedy utilities and actions) still take them so the learner treats them alike.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.initializers import constant

from jaxmarl_llm.learners.initializers import orthogonal


class VDNMixer(nn.Module):
    """Value decomposition networks (Sunehag et al., 2018): ``Q_tot = sum_i Q_i``."""

    @nn.compact
    def __call__(self, agent_qs: jax.Array, state: jax.Array, max_qs=None, actions=None):
        return agent_qs.sum(-1)


def _hypernet(
    out_dim: int, hidden_dim: int, scale: float, name: str, out_bias: float = 0.0
) -> nn.Module:
    def dense(d, bias=0.0):
        return nn.Dense(d, kernel_init=orthogonal(scale), bias_init=constant(bias))

    return nn.Sequential([dense(hidden_dim), nn.relu, dense(out_dim, out_bias)], name=name)


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
    def __call__(self, agent_qs: jax.Array, state: jax.Array, max_qs=None, actions=None):
        n, scale = agent_qs.shape[-1], self.init_scale
        state = jnp.broadcast_to(state, (*agent_qs.shape[:-1], state.shape[-1]))
        w1 = jnp.abs(_hypernet(n * self.embed_dim, self.hypernet_dim, scale, "hyper_w1")(state))
        w1 = w1.reshape(*agent_qs.shape[:-1], n, self.embed_dim)
        b1 = nn.Dense(self.embed_dim, kernel_init=orthogonal(scale), name="hyper_b1")(state)
        hidden = nn.elu(jnp.einsum("...n,...ne->...e", agent_qs, w1) + b1)
        w2 = jnp.abs(_hypernet(self.embed_dim, self.hypernet_dim, scale, "hyper_w2")(state))
        v = _hypernet(1, self.embed_dim, scale, "hyper_v")(state)[..., 0]
        return jnp.einsum("...e,...e->...", hidden, w2) + v


class QPLEXMixer(nn.Module):
    """QPLEX (Wang et al., 2021): the duplex dueling mixer, which covers every joint value
    consistent with the agents' greedy actions (IGM), monotonic or not.

    Each utility becomes ``Q_i' = w_i(s) Q_i + b_i(s)`` (``w_i > 0``) and its greedy value
    ``V_i' = w_i(s) max Q_i + b_i(s)``; then
    ``Q_tot = sum_i V_i' + sum_i lambda_i(s, a) (Q_i' - V_i')`` with positive importance
    weights ``lambda_i`` from ``num_heads`` attention-like heads over the state and the
    joint action (pymarl2's DMAQ-Qatten "SI weight"). At the greedy joint action the
    advantages vanish and ``Q_tot = sum_i V_i'``.
    """

    hypernet_dim: int = 64
    num_heads: int = 4
    init_scale: float = 0.001

    @nn.compact
    def __call__(self, agent_qs: jax.Array, state: jax.Array, max_qs=None, actions=None):
        if max_qs is None or actions is None:
            raise ValueError("the QPLEX mixer needs the greedy utilities and the joint action")
        n, lead = agent_qs.shape[-1], agent_qs.shape[:-1]
        state = jnp.broadcast_to(state, (*lead, state.shape[-1]))
        hyper = lambda out, name, bias=0.0: _hypernet(
            out, self.hypernet_dim, self.init_scale, name, bias
        )
        # w_i starts at 1 whatever the state's scale (a near-0 w would block the gradient
        # to the agents' utilities), b_i at 0
        w = jnp.abs(hyper(n, "hyper_w", 1.0)(state)) + 1e-10
        b = hyper(n, "hyper_b")(state)
        q, v = w * agent_qs + b, w * max_qs + b
        adv = q - v
        joint = jnp.concatenate([state, actions.reshape(*lead, -1).astype(state.dtype)], -1)
        dense = lambda d, name: nn.Dense(
            d, kernel_init=orthogonal(1.0), bias_init=constant(0.0), name=name
        )
        heads = self.num_heads
        key = jnp.abs(dense(heads, "key")(state)) + 1e-10  # [..., K]
        agents = nn.sigmoid(dense(heads * n, "agents")(state)).reshape(*lead, heads, n)
        act = nn.sigmoid(dense(heads * n, "action")(joint)).reshape(*lead, heads, n)
        lam = (key[..., None] * agents * act).sum(-2)  # [..., N], > 0
        return v.sum(-1) + (lam * adv).sum(-1)


def _qmix(cfg) -> QMixer:
    if cfg is None:
        return QMixer()
    return QMixer(
        embed_dim=int(cfg.mixer_embed_dim),
        hypernet_dim=int(cfg.mixer_hypernet_dim),
        init_scale=float(cfg.mixer_init_scale),
    )


def _qplex(cfg) -> QPLEXMixer:
    if cfg is None:
        return QPLEXMixer()
    return QPLEXMixer(
        hypernet_dim=int(cfg.mixer_hypernet_dim), init_scale=float(cfg.mixer_init_scale)
    )


# mixer name (an ``AlgoSpec.mixer``) -> the mixer of a config (``None``: the defaults)
MIXERS: dict[str, Callable[..., nn.Module]] = {
    "qmix": _qmix,
    "vdn": lambda cfg: VDNMixer(),
    "qplex": _qplex,
}


def make_mixer(name: str, cfg=None) -> nn.Module:
    """The mixer called ``name`` (a key of ``MIXERS``); ``cfg`` supplies
    ``mixer_embed_dim``, ``mixer_hypernet_dim`` and ``mixer_init_scale`` (defaults when
    None).
    """
    name = str(getattr(name, "value", name))
    if name not in MIXERS:
        raise ValueError(f"unknown mixer {name!r}; valid: {', '.join(MIXERS)}")
    return MIXERS[name](cfg)
