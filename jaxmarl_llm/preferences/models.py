"""Reward / potential models: MLPs over features, as ensembles, shared or per agent group.

:class:`RewardModel` is a static (hashable) description; its parameters are a pytree
whose leaves are stacked ``[E, G, ...]``: ``E`` ensemble members (DPM uses 3) times ``G``
agent groups (LCA: one model shared by homogeneous agents, one per group of
heterogeneous ones). Everything is pure:

    params = model.init(key, feature_dim)
    values = model.apply(params, features, agent)          # [...]     ensemble mean
    values = model.apply_members(params, features, agent)  # [E, ...]  every member
    values = model.apply_agents(params, obs)               # obs [..., N, D] -> [..., N]

``agent`` (int, broadcast against ``features.shape[:-1]``) picks the agent's group's
parameters and, with ``agent_one_hot``, is appended to the input as a one-hot vector.
The same model serves as a state-scoring potential (LCA: reward = phi(o') - phi(o), see
:meth:`RewardModel.potential_difference`) or as a per-step reward model (DPM).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

_ACTIVATIONS = {"relu": nn.relu, "tanh": nn.tanh, "gelu": nn.gelu, "silu": nn.silu}
_OUTPUTS = {"linear": lambda x: x, "tanh": nn.tanh}


class ScoreMLP(nn.Module):
    """MLP ``[..., D] -> [...]`` (one scalar score per input)."""

    hidden: Sequence[int] = (64, 64)
    activation: str = "relu"
    output: str = "linear"

    @nn.compact
    def __call__(self, x):
        act = _ACTIVATIONS[self.activation]
        for h in self.hidden:
            x = act(nn.Dense(h)(x))
        return _OUTPUTS[self.output](nn.Dense(1)(x)[..., 0])


class EncodedScoreNet(nn.Module):
    """DPM's reward net (appendix A.4, Table 4): the input is split into blocks (state,
    next state, observation, action), each block has its own linear encoder of
    ``encoder_width``; their concatenation goes through the hidden layers to one output.

    The first ``shared_blocks`` blocks hold the same values for every agent (DPM's state
    and next state, broadcast over the agent axis ``-2``): they are encoded once per step
    from agent 0's copy and broadcast, the same result for a fraction of the work."""

    blocks: Sequence[int]
    encoder_width: int = 16
    hidden: Sequence[int] = (16,)
    activation: str = "relu"
    output: str = "linear"
    shared_blocks: int = 0

    @nn.compact
    def __call__(self, x):
        act = _ACTIVATIONS[self.activation]
        bounds = np.cumsum([0, *self.blocks])
        if x.shape[-1] != bounds[-1]:
            raise ValueError(f"input width {x.shape[-1]} != sum of blocks {tuple(self.blocks)}")
        if self.shared_blocks and x.ndim < 2:
            raise ValueError("shared_blocks needs inputs with an agent axis [..., N, D]")
        out_shape = (*x.shape[:-1], self.encoder_width)
        parts = []
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            block = x[..., :1, lo:hi] if i < self.shared_blocks else x[..., lo:hi]
            encoded = nn.Dense(self.encoder_width, name=f"encoder_{i}")(block)
            parts.append(jnp.broadcast_to(encoded, out_shape))
        x = act(jnp.concatenate(parts, -1))
        for h in self.hidden:
            x = act(nn.Dense(h)(x))
        return _OUTPUTS[self.output](nn.Dense(1)(x)[..., 0])


@dataclasses.dataclass(frozen=True)
class RewardModel:
    """Static description of an ensemble of (grouped) score MLPs. Hashable: pass it as a
    static argument to jitted functions.

    Attributes:
      hidden: hidden layer sizes.
      ensemble_size: number of independently initialised members ``E``.
      num_agents: number of agents (size of the one-hot id, length of ``agent_groups``).
      agent_groups: group index of every agent (``len == num_agents``); ``None`` means one
        model shared by all agents (homogeneous agents).
      agent_one_hot: append the agent's one-hot id to the features.
      activation: hidden activation (relu, tanh, gelu, silu).
      output: ``linear`` (unbounded score) or ``tanh`` (score in [-1, 1]).
      blocks: widths of the feature blocks, each with its own linear encoder of
        ``encoder_width`` (DPM's reward net); ``None``: a plain MLP over the features.
      agent_shared_blocks: how many leading blocks are the same for every agent (features
        ``[..., N, D]``, e.g. the global state): encoded once per step, not once per agent.
        Only a speed-up: the scores are those of ``0``, and the model must then always be
        applied to features with the agent axis at ``-2``.
    """

    hidden: tuple[int, ...] = (64, 64)
    ensemble_size: int = 1
    num_agents: int = 1
    agent_groups: tuple[int, ...] | None = None
    agent_one_hot: bool = False
    activation: str = "relu"
    output: str = "linear"
    blocks: tuple[int, ...] | None = None
    encoder_width: int = 16
    agent_shared_blocks: int = 0

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if self.blocks is not None:
            object.__setattr__(self, "blocks", tuple(int(b) for b in self.blocks))
        if self.agent_groups is not None:
            groups = tuple(int(g) for g in self.agent_groups)
            object.__setattr__(self, "agent_groups", groups)
            if len(groups) != self.num_agents:
                raise ValueError(
                    f"agent_groups has {len(groups)} entries for {self.num_agents} agents"
                )
            if sorted(set(groups)) != list(range(max(groups) + 1)):
                raise ValueError(f"agent_groups must use the groups 0..G-1, got {groups}")
        shared = self.agent_shared_blocks
        if shared and (self.blocks is None or not 0 <= shared <= len(self.blocks)):
            raise ValueError(
                f"agent_shared_blocks={shared} needs that many leading feature blocks "
                f"(blocks={self.blocks})"
            )
        if self.ensemble_size < 1:
            raise ValueError(f"ensemble_size must be >= 1, got {self.ensemble_size}")
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; valid: {list(_ACTIVATIONS)}")
        if self.output not in _OUTPUTS:
            raise ValueError(f"unknown output {self.output!r}; valid: {list(_OUTPUTS)}")

    @property
    def num_groups(self) -> int:
        return 1 if self.agent_groups is None else max(self.agent_groups) + 1

    @property
    def module(self) -> nn.Module:
        if self.blocks is not None:
            blocks = self.blocks
            if self.agent_one_hot:  # the one-hot id is one more block
                blocks = (*blocks, self.num_agents)
            return EncodedScoreNet(
                blocks,
                self.encoder_width,
                self.hidden,
                self.activation,
                self.output,
                self.agent_shared_blocks,
            )
        return ScoreMLP(self.hidden, self.activation, self.output)

    def input_dim(self, feature_dim: int) -> int:
        return feature_dim + (self.num_agents if self.agent_one_hot else 0)

    # ----- parameters ----------------------------------------------------------------

    def init(self, key: jax.Array, feature_dim: int):
        """Parameters with leaves ``[E, G, ...]``, every (member, group) from its own key."""
        return _init_params(self, key, int(feature_dim))

    def member(self, params, index: int):
        """Parameters of ensemble member ``index`` (leaves ``[G, ...]``)."""
        return jax.tree.map(lambda x: x[index], params)

    # ----- apply ---------------------------------------------------------------------

    def _check_agent(self, agent) -> None:
        if agent is None and (self.agent_one_hot or self.num_groups > 1):
            raise ValueError("this model needs agent ids (one-hot input or agent groups)")

    def _inputs(self, features: jax.Array, agent) -> tuple[jax.Array, jax.Array | None]:
        features = jnp.asarray(features, jnp.float32)
        self._check_agent(agent)
        if agent is None:
            return features, None
        agent = jnp.broadcast_to(jnp.asarray(agent, jnp.int32), features.shape[:-1])
        if self.agent_one_hot:
            one_hot = jax.nn.one_hot(agent, self.num_agents, dtype=features.dtype)
            features = jnp.concatenate([features, one_hot], -1)
        return features, agent

    def apply_member(self, member_params, features: jax.Array, agent=None) -> jax.Array:
        """One member's scores ``[...]`` of ``features [..., D]`` (params leaves ``[G, ...]``)."""
        shape = jnp.shape(features)
        if self.agent_shared_blocks and (len(shape) < 2 or shape[-2] != self.num_agents):
            # agent 0's copy of the shared blocks is read: any other axis at -2 (a batch of
            # state pairs, say) would be silently scored with its first row's state
            raise ValueError(
                "agent_shared_blocks needs features with the agent axis "
                f"[..., {self.num_agents}, D], got shape {shape}"
            )
        x, agent = self._inputs(features, agent)
        if self.num_groups == 1:
            return self.module.apply(jax.tree.map(lambda p: p[0], member_params), x)
        # Every group's model on every input, then each input's own group (G is small).
        per_group = jax.vmap(lambda p: self.module.apply(p, x))(member_params)  # [G, ...]
        group = jnp.asarray(self.agent_groups, jnp.int32)[agent]
        return jnp.take_along_axis(per_group, group[None], 0)[0]

    def apply_members(self, params, features: jax.Array, agent=None) -> jax.Array:
        """Every member's scores ``[E, ...]``."""
        self._check_agent(agent)
        return jax.vmap(lambda p: self.apply_member(p, features, agent))(params)

    def apply(self, params, features: jax.Array, agent=None) -> jax.Array:
        """Ensemble-mean score ``[...]`` (DPM: the reward is the members' average)."""
        return self.apply_members(params, features, agent).mean(0)

    def apply_agents(self, params, obs: jax.Array) -> jax.Array:
        """Per-agent scores ``[..., N]`` of per-agent features ``[..., N, D]``."""
        agent = jnp.arange(obs.shape[-2], dtype=jnp.int32)
        return self.apply(params, obs, agent)

    def potential_difference(
        self, params, obs: jax.Array, next_obs: jax.Array, gamma: float = 1.0
    ) -> jax.Array:
        """LCA eq. 4 per agent: ``gamma * phi(o') - phi(o)`` ``[..., N]`` (``gamma=1`` as in
        the paper; ``gamma < 1`` is the policy-invariant Ng et al. shaping)."""
        return gamma * self.apply_agents(params, next_obs) - self.apply_agents(params, obs)


@functools.lru_cache(maxsize=64)
def _init_one(model: RewardModel, feature_dim: int):
    dummy = np.zeros((1, model.input_dim(feature_dim)), np.float32)  # not a tracer: cached
    return jax.jit(lambda k: model.module.init(k, dummy))


def _init_params(model: RewardModel, key: jax.Array, feature_dim: int):
    # A loop over one compiled single-model init: a vmapped init compiles several times
    # slower on CPU, and this works as well inside jit/vmap (e.g. over seeds).
    e, g = model.ensemble_size, model.num_groups
    keys = jax.random.split(key, e * g)
    init = _init_one(model, feature_dim)
    members = [init(keys[i]) for i in range(e * g)]
    return jax.tree.map(lambda *xs: jnp.stack(xs).reshape(e, g, *xs[0].shape), *members)
