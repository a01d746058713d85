"""Agent networks shared by the learners: MLP and GRU torsos, actor, critic, Q heads,
and ``AgentParams``, which applies one module with shared or per-group parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.linen.initializers import constant

from jaxmarl_llm.learners.initializers import orthogonal


class ParamSharing(str, Enum):
    shared = "shared"  # one set of parameters, agent id appended to inputs
    per_group = "per_group"  # one set per agent group (heterogeneous agents)
    per_agent = "per_agent"  # one set per agent


class Activation(str, Enum):
    """Hidden-layer nonlinearity of the MLP torsos."""

    tanh = "tanh"
    relu = "relu"
    gelu = "gelu"


def _activation(name: str):
    try:
        return {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; valid: tanh, relu, gelu") from None


class MLP(nn.Module):
    """Orthogonal-initialised MLP; the last layer has ``out_dim`` units and ``out_scale`` gain."""

    hidden: Sequence[int]
    out_dim: int
    activation: str = "tanh"
    out_scale: float = 0.01

    @nn.compact
    def __call__(self, x):
        act = _activation(self.activation)
        for h in self.hidden:
            x = act(nn.Dense(h, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x))
        return nn.Dense(
            self.out_dim, kernel_init=orthogonal(self.out_scale), bias_init=constant(0.0)
        )(x)


class ResetGRU(nn.Module):
    """GRU over time ``[T, B..., D]`` that zeroes its carry where ``resets`` [T, B...] is set.

    ``resets[t]`` marks that the input at ``t`` starts a new episode, so the carry is
    cleared before it is used.
    """

    hidden_dim: int

    @nn.compact
    def __call__(self, carry, xs, resets):
        cell = nn.GRUCell(
            self.hidden_dim,
            kernel_init=orthogonal(np.sqrt(2)),
            recurrent_kernel_init=orthogonal(1.0),
        )

        def step(cell, carry, inp):
            x, reset = inp
            carry = jnp.where(reset[..., None], jnp.zeros_like(carry), carry)
            carry, y = cell(carry, x)
            return carry, y

        scan = nn.scan(step, variable_broadcast="params", split_rngs={"params": False})
        return scan(cell, carry, (xs, resets))

    def initial_carry(self, batch_shape: tuple[int, ...]) -> jax.Array:
        return jnp.zeros((*batch_shape, self.hidden_dim), jnp.float32)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (as in the common PPO setting).

    Returns ``(logits [..., A], value [...])``. ``critic_inputs`` defaults to ``x``
    (IPPO); MAPPO passes the centralized state instead.
    """

    num_actions: int
    hidden: Sequence[int] = (64, 64)
    activation: str = "tanh"

    def setup(self):
        self.actor = MLP(self.hidden, self.num_actions, self.activation, 0.01)
        self.critic = MLP(self.hidden, 1, self.activation, 1.0)

    def __call__(self, x, critic_inputs=None):
        c = x if critic_inputs is None else critic_inputs
        return self.actor(x), self.critic(c)[..., 0]

    def policy_logits(self, x):
        """The actor alone (acting and evaluation need no value)."""
        return self.actor(x)


class CommNetActorCritic(nn.Module):
    """CommNet actor (Sukhbaatar et al., 2016) with an MLP critic.

    Each agent encodes its input, ``h_i = f(x_i)``; every communication step replaces
    ``h_i`` by ``f_k([h_i, c_i])`` where ``c_i`` is the mean of the *other* agents'
    ``h_j``; a linear head gives the logits. Inputs carry the agent axis:
    ``x [..., N, D]``, ``critic_inputs [..., N, C]``. Returns ``(logits [..., N, A],
    value [..., N])``.
    """

    num_actions: int
    hidden: Sequence[int] = (64, 64)
    activation: str = "tanh"
    comm_steps: int = 1

    def setup(self):
        width = self.hidden[-1]
        dense = lambda: nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))
        self.encoder = [
            nn.Dense(h, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))
            for h in self.hidden
        ]
        self.comm = [dense() for _ in range(self.comm_steps)]
        self.head = nn.Dense(
            self.num_actions, kernel_init=orthogonal(0.01), bias_init=constant(0.0)
        )
        self.critic = MLP(self.hidden, 1, self.activation, 1.0)

    def __call__(self, x, critic_inputs=None):
        c = x if critic_inputs is None else critic_inputs
        return self.policy_logits(x), self.critic(c)[..., 0]

    def policy_logits(self, x):
        act = _activation(self.activation)
        h = x
        for layer in self.encoder:
            h = act(layer(h))
        n = h.shape[-2]
        for layer in self.comm:
            others = (h.sum(-2, keepdims=True) - h) / max(n - 1, 1)
            h = act(layer(jnp.concatenate([h, others], axis=-1)))
        return self.head(h)


class RecurrentActor(nn.Module):
    """Dense -> GRU -> MLP policy head. Inputs ``[T, B..., D]``; returns (carry, logits)."""

    num_actions: int
    hidden_dim: int = 128
    activation: str = "relu"

    @nn.compact
    def __call__(self, carry, x, resets):
        act = _activation(self.activation)
        x = act(nn.Dense(self.hidden_dim, kernel_init=orthogonal(np.sqrt(2)))(x))
        carry, y = ResetGRU(self.hidden_dim, name="gru")(carry, x, resets)
        logits = MLP((self.hidden_dim,), self.num_actions, self.activation, 0.01, name="head")(y)
        return carry, logits


class RecurrentCritic(nn.Module):
    """Dense -> GRU -> MLP value head. Inputs ``[T, B..., D]``; returns (carry, value)."""

    hidden_dim: int = 128
    activation: str = "relu"

    @nn.compact
    def __call__(self, carry, x, resets):
        act = _activation(self.activation)
        x = act(nn.Dense(self.hidden_dim, kernel_init=orthogonal(np.sqrt(2)))(x))
        carry, y = ResetGRU(self.hidden_dim, name="gru")(carry, x, resets)
        value = MLP((self.hidden_dim,), 1, self.activation, 1.0, name="head")(y)[..., 0]
        return carry, value


def agent_one_hot(num_agents: int, batch_shape: tuple[int, ...]) -> jax.Array:
    """One-hot agent ids broadcast to ``[*batch_shape, N, N]``."""
    return jnp.broadcast_to(
        jnp.eye(num_agents, dtype=jnp.float32), (*batch_shape, num_agents, num_agents)
    )


def with_agent_ids(x: jax.Array) -> jax.Array:
    """Append one-hot agent ids to per-agent inputs ``[..., N, D]``."""
    n = x.shape[-2]
    return jnp.concatenate([x, agent_one_hot(n, x.shape[:-2])], axis=-1)


def apply_recurrent_flat(agents: AgentParams, params, carry, xs, resets):
    """A recurrent module ``(carry [B, N, H], xs [T, B, N, D], resets [T, B, N]) ->
    (carry, outputs [T, B, N, ...])`` under ``agents``. With shared parameters the agent
    axis is folded into the batch, so every step of the scan multiplies 2-D ``[B * N, D]``
    matrices: XLA:CPU runs a ``[B, N, D]`` dot, and its gradient, markedly slower (MAPPO-RNN
    on SMAX 3m: 20% of the whole run). Otherwise the agent axis goes to ``agents.apply``."""
    if agents.num_groups > 1:
        return agents.apply(params, carry, xs, resets, agent_axes=(1, 2, 2), out_axes=(1, 2))
    T, B, N = xs.shape[:3]
    carry, out = agents.apply(
        params,
        carry.reshape(B * N, -1),
        xs.reshape(T, B * N, -1),
        resets.reshape(T, B * N),
    )
    unfold = lambda x, lead: x.reshape(*lead, *x.shape[len(lead) - 1 :])
    return unfold(carry, (B, N)), jax.tree.map(lambda x: unfold(x, (T, B, N)), out)


class AgentParams:
    """Applies ``module`` to per-agent inputs with shared, per-group or per-agent params.

    Inputs carry the agent axis at ``agent_axis`` (default -2: ``[..., N, D]``). With
    shared parameters the agents are just more batch; otherwise parameters are stacked
    over groups and each agent's slice is gathered and vmapped over the agent axis, so
    every layout runs as one batched program.
    """

    def __init__(self, module: nn.Module, agent_groups: np.ndarray, sharing: ParamSharing | str):
        self.module = module
        self.sharing = ParamSharing(sharing)
        groups = np.asarray(agent_groups, np.int32)
        if self.sharing == ParamSharing.per_agent:
            groups = np.arange(len(groups), dtype=np.int32)
        elif self.sharing == ParamSharing.shared:
            groups = np.zeros_like(groups)
        self.groups = groups
        self.num_groups = int(groups.max()) + 1

    def init(self, rng: jax.Array, *sample_inputs):
        """``sample_inputs`` are single-agent inputs (no agent axis)."""
        if self.num_groups == 1:
            return self.module.init(rng, *sample_inputs)
        rngs = jax.random.split(rng, self.num_groups)
        return jax.vmap(lambda r: self.module.init(r, *sample_inputs))(rngs)

    def apply(
        self,
        params,
        *inputs,
        agent_axes: Sequence[int | None] | None = None,
        out_axes=None,
        method=None,
    ):
        """Apply to inputs that each carry the agent axis at ``agent_axes[i]``
        (default: second to last). ``out_axes`` (a prefix of the output pytree) says
        where the agent axis goes in the outputs; default: ``agent_axes[0]``. With shared
        parameters the inputs are passed through as they are. ``method`` names another
        method of the module to call (flax's ``apply(..., method=)``).
        """
        apply = lambda p, *x: self.module.apply(p, *x, method=method)
        if self.num_groups == 1:
            return apply(params, *inputs)
        if agent_axes is None:
            agent_axes = [x.ndim - 2 for x in inputs]
        out_axis = agent_axes[0] if out_axes is None else out_axes
        per_agent = jax.tree.map(lambda p: p[self.groups], params)
        f = jax.vmap(apply, in_axes=(0, *agent_axes), out_axes=out_axis)
        return f(per_agent, *inputs)
