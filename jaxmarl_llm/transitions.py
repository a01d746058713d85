"""The one transition type: what acting records per env step, what replay buffers store
and sample, and what a shaper reads.

It sits below the learners and ``shaping/``: both read it, and neither needs the other
for it. ``shaping`` re-exports it as its input type.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import struct


@struct.dataclass
class TransitionBatch:
    """Transitions with any leading batch shape ``[...]`` (steps, envs, buffer items).

    A field the producer does not fill is ``None``: a replay buffer stores only what the
    shaper and its learner read (a shaper names its fields in ``Shaper.fields``), and a
    pair sampler keeps only states and actions.
    """

    obs: jax.Array | None = None  # [..., N, D]
    actions: jax.Array | None = None  # [..., N] int
    next_obs: jax.Array | None = None  # [..., N, D], true next observation (pre-reset)
    reward: jax.Array | None = None  # [..., N] env reward
    done: jax.Array | None = None  # [...] bool, episode ended at this step
    state: Any = None  # env state pytree, leaves [..., ...]
    next_state: Any = None  # true next env state (pre-reset)
    # [..., S] float32: the centralized state of ``state`` and of ``next_state`` as one
    # vector (``ArrayEnv.state_vector``). A reward model of the state reads these: one
    # small array per step to store and sample, and computed once per collected step
    # instead of at every sample of it.
    world_state: jax.Array | None = None
    next_world_state: jax.Array | None = None
    avail: jax.Array | None = None  # [..., N, A] bool, legal actions at obs
    # [..., N, A] legal actions at the next obs (post-reset: read only where the episode
    # goes on)
    next_avail: jax.Array | None = None
    # [N, H] a recurrent learner's acting carry before step 0 of a stored sequence, zeros
    # where obs[0] starts an episode (the one leaf without the sequence's time axis)
    hidden0: jax.Array | None = None


# the fields a shaper may ask for (``Shaper.fields``)
ALL_FIELDS = (
    "obs", "actions", "next_obs", "state", "next_state", "world_state", "next_world_state"
)  # fmt: skip
