"""The device mesh a run trains on, and a learner's functions placed on it.

A run's devices form a 2-D mesh ``(seeds, data)``: vmapped seeds split over the
``seeds`` axis, each seed's envs over the ``data`` axis. Under ``shard_map`` every device
runs the learner built for one data shard (``learners.shards``): its envs, its part of
any replay buffer, gradients averaged with the other shards of its seed by ``pmean``.
Parameters and optimiser states are therefore replicated over ``data``. (``shard_map``'s
own replication check is off: flax's scanned GRUs start from constant carries that it
cannot type. ``ShardedLearner(check_replicas=True)`` on virtual shards checks instead that
every shard returns the same value of each replicated leaf; the tests use it.)

Which state leaves are split, and along which axis, is read from shapes: a leaf of the
one-shard learner's state whose length along one axis is ``data`` times the per-shard
learner's is split along it; a leaf of equal shape is replicated.

A ``RunMesh`` without a ``mesh`` has virtual data shards: the same per-shard program
under ``vmap`` with the ``data`` axis name, on whatever device holds the state: what
``N`` devices compute, on one (tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from omegaconf import DictConfig

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.base import Learner, run_chunk
from jaxmarl_llm.learners.shards import DATA_AXIS, DataShards

SEEDS_AXIS = "seeds"
REPLICATED = -1  # the split axis of a leaf every data shard holds whole


@dataclass(frozen=True)
class RunMesh:
    """``seeds`` x ``data`` devices (``mesh`` is None where the data shards are virtual)."""

    seeds: int
    data: int
    mesh: Mesh | None = None
    exact: bool = False  # data shards compute what one device computes (``DataShards``)

    @property
    def virtual(self) -> bool:
        return self.mesh is None

    @property
    def shards(self) -> DataShards:
        return DataShards(self.data, self.exact)

    def describe(self) -> dict:
        """What the run summary records."""
        out = {"devices": self.seeds * self.data, "seeds_axis": self.seeds, "data_axis": self.data}
        if self.data > 1:
            out["exact_shards"] = self.exact
        if self.mesh is None:
            out["virtual"] = True
            return out
        device = self.mesh.devices.flat[0]
        out.update(
            platform=device.platform,
            device_kind=device.device_kind,
            processes=jax.process_count(),
        )
        return out


def resolve_devices(devices: Any, available: int) -> int:
    """``mesh.devices`` (``all`` or a count) as a count of the ``available`` devices."""
    if isinstance(devices, str) and devices.strip().lower() == "all":
        return available
    try:
        n = int(devices)
    except (TypeError, ValueError):
        n = 0
    if n < 1 or str(devices).strip() != str(n):
        raise ConfigError(f"bad value for config key 'mesh.devices': {devices!r}; 'all' or a count")
    if n > available:
        raise ConfigError(
            f"bad value for config key 'mesh.devices': {n}, but only {available} devices are "
            f"visible ({jax.devices()[0].platform}). On a CPU, XLA_FLAGS="
            f"--xla_force_host_platform_device_count={n} makes {n} host devices"
        )
    return n


def make_run_mesh(mesh_cfg: DictConfig, num_seeds: int) -> RunMesh:
    """The mesh of ``mesh_cfg`` over the first ``mesh.devices`` devices (in
    ``jax.devices()`` order, which spans every process)."""
    devices = jax.devices()
    n = resolve_devices(mesh_cfg.devices, len(devices))
    seeds = int(mesh_cfg.seeds)
    if seeds < 1 or n % seeds:
        raise ConfigError(
            f"bad value for config key 'mesh.seeds': {seeds}; it must divide the {n} devices "
            "(mesh.devices)"
        )
    if num_seeds % seeds:
        raise ConfigError(
            f"bad value for config key 'mesh.seeds': {seeds} does not divide num_seeds={num_seeds}"
        )
    grid = np.asarray(devices[:n], dtype=object).reshape(seeds, n // seeds)
    return RunMesh(
        seeds=seeds,
        data=n // seeds,
        mesh=Mesh(grid, (SEEDS_AXIS, DATA_AXIS)),
        exact=bool(mesh_cfg.get("exact", False)),
    )


def split_axes(whole: Any, part: Any, shards: int) -> Any:
    """Per leaf of the state shapes ``whole`` (one shard) and ``part`` (one of
    ``shards``), the axis the leaf is split along, or ``REPLICATED``."""

    def axis(path, w, p):
        if w.shape == p.shape:
            return REPLICATED
        differ = [i for i, (a, b) in enumerate(zip(w.shape, p.shape, strict=True)) if a != b]
        if len(differ) != 1 or w.shape[differ[0]] != shards * p.shape[differ[0]]:
            name = jax.tree_util.keystr(path)
            raise ValueError(
                f"state leaf {name}: shape {w.shape} on one shard, {p.shape} on each of "
                f"{shards}: not a split along one axis"
            )
        return differ[0]

    return jax.tree_util.tree_map_with_path(axis, whole, part)


def seed_spec(axis: int) -> P:
    """The PartitionSpec of a seed-stacked leaf (seeds on axis 0) split along ``axis``
    over data shards, or replicated over them."""
    if axis == REPLICATED:
        return P(SEEDS_AXIS)
    return P(SEEDS_AXIS, *([None] * (axis - 1)), DATA_AXIS)


def to_host(tree: Any) -> Any:
    """Numpy copies of ``tree``'s arrays on this process, gathered from every process
    where they span several."""
    leaves = jax.tree.leaves(tree)
    if all(getattr(x, "is_fully_addressable", True) for x in leaves):
        return jax.device_get(tree)
    return multihost_utils.process_allgather(tree, tiled=True)


class ShardedLearner:
    """A learner's init, chunk of updates and collection, jitted on a ``RunMesh``.

    ``whole`` is the learner built as one shard (what the runner reads: update counts,
    the greedy policy); ``part`` the same learner built as one of ``mesh.data`` shards.
    """

    def __init__(self, whole: Learner, part: Learner, mesh: RunMesh, check_replicas=False):
        self.whole, self.part, self.run_mesh = whole, part, mesh
        self.check_replicas = check_replicas
        keys = jax.ShapeDtypeStruct((1, 2), jnp.uint32)
        whole_state = jax.eval_shape(jax.vmap(whole.init), keys)
        if mesh.data == 1:
            self.axes = jax.tree.map(lambda _: REPLICATED, whole_state)
            return
        # one shard's state, traced where the data axis is bound
        shards = jax.vmap(
            jax.vmap(self._init_part), in_axes=None, axis_size=mesh.data, axis_name=DATA_AXIS
        )
        part_state = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), jax.eval_shape(shards, keys)
        )
        self.axes = split_axes(whole_state, part_state, mesh.data)

    def _init_part(self, key):
        return self.part.init(key)

    # ----- placement ------------------------------------------------------------------
    @cached_property
    def state_specs(self) -> Any:
        return jax.tree.map(seed_spec, self.axes)

    def state_shardings(self) -> Any:
        """The NamedSharding of every state leaf (None where virtual)."""
        if self.run_mesh.virtual:
            return None
        mesh = self.run_mesh.mesh
        return jax.tree.map(lambda s: NamedSharding(mesh, s), self.state_specs)

    def place_keys(self, keys: jax.Array) -> jax.Array:
        """Per-seed keys ``[seeds, 2]`` split over the seeds axis."""
        if self.run_mesh.virtual:
            return keys
        sharding = NamedSharding(self.run_mesh.mesh, P(SEEDS_AXIS))
        return jax.device_put(np.asarray(keys), sharding)

    def _on_mesh(self, body: Callable, in_specs, out_specs) -> Callable:
        """``body`` (on one data shard's leaves, every local seed) over the mesh, or over
        virtual shards."""
        if not self.run_mesh.virtual:
            if self.run_mesh.mesh.devices.size == 1:
                # one shard on one device: every collective is the identity, and the
                # plain program compiles faster than the same one under shard_map
                return body
            return jax.shard_map(
                body,
                mesh=self.run_mesh.mesh,
                in_specs=in_specs,
                out_specs=out_specs,
                check_vma=False,
            )
        return _virtual(body, in_specs, out_specs, self.run_mesh.data, self.check_replicas)

    # ----- the functions the runner calls ------------------------------------------------
    def init(self) -> Callable:
        """``keys [seeds, 2] -> state``, jitted."""
        body = jax.vmap(self._init_part)
        return jax.jit(self._on_mesh(body, P(SEEDS_AXIS), self.state_specs))

    def chunk(self, n: int) -> Callable:
        """``state -> (state, metrics [seeds, n])``: ``n`` updates of every seed, jitted,
        the input state donated."""
        body = jax.vmap(lambda s: run_chunk(self.part, s, n))
        fn = self._on_mesh(body, (self.state_specs,), (self.state_specs, P(SEEDS_AXIS)))
        return jax.jit(fn, donate_argnums=0)

    def collect(self) -> Callable:
        """``(state, keys [seeds, 2], steps) -> TransitionBatch [seeds, steps, E, ...]``
        of ``Learner.collect``, jitted with ``steps`` static; every leaf's env axis is
        split over data shards."""

        def fn(state, keys, steps):
            body = jax.vmap(lambda s, k: self.part.collect(s, k, steps))
            out_spec = P(SEEDS_AXIS, None, DATA_AXIS)
            return self._on_mesh(body, (self.state_specs, P(SEEDS_AXIS)), out_spec)(state, keys)

        jitted = jax.jit(fn, static_argnums=2)
        return lambda state, keys, steps: jitted(state, self.place_keys(keys), steps)


def disagreed(dtype) -> jax.Array:
    """What fills a replicated leaf of ``dtype`` whose virtual shards disagree: NaN, or
    -1 (all bits set where unsigned, as in an RNG key's ``uint32``; True where boolean,
    which a leaf can hold anyway: a boolean leaf's check is not conclusive)."""
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.asarray(jnp.nan, dtype)
    if jnp.issubdtype(dtype, jnp.unsignedinteger):
        return jnp.asarray(jnp.iinfo(dtype).max, dtype)
    return jnp.asarray(-1, dtype)


def _virtual(body: Callable, in_specs, out_specs, shards: int, check: bool) -> Callable:
    """``body`` vmapped over ``shards`` virtual data shards (axis name ``data``): each
    input leaf split along its spec's ``data`` dimension (or broadcast where it has
    none), each output leaf joined back along its spec's (or taken from shard 0, where
    every shard holds the same value; with ``check``, a leaf whose shards differ comes
    back filled with ``disagreed``'s marker)."""

    def data_dim(spec: P) -> int | None:
        return next((i for i, name in enumerate(spec) if name == DATA_AXIS), None)

    def split(x, spec):
        d = data_dim(spec)
        if d is None:
            return jnp.broadcast_to(x, (shards, *x.shape))
        x = x.reshape(*x.shape[:d], shards, x.shape[d] // shards, *x.shape[d + 1 :])
        return jnp.moveaxis(x, d, 0)

    def join(x, spec):
        d = data_dim(spec)
        if d is None:
            if check:  # a marker fills a leaf whose shards disagree
                same = x == x[0:1]
                if jnp.issubdtype(x.dtype, jnp.inexact):  # NaN: a metric with no data
                    same |= jnp.isnan(x) & jnp.isnan(x[0:1])
                return jnp.where(jnp.all(same), x[0], disagreed(x.dtype))
            return x[0]
        x = jnp.moveaxis(x, 0, d)
        return x.reshape(*x.shape[:d], -1, *x.shape[d + 2 :])

    def each(fn, values, specs):
        """``fn`` on every leaf of ``values`` with its spec (``specs``: one spec for all
        of ``values``, or a tree of them)."""
        if isinstance(specs, P):
            return jax.tree.map(lambda x: fn(x, specs), values)
        return jax.tree.map(fn, values, specs)

    in_tuple = in_specs if isinstance(in_specs, tuple) else (in_specs,)

    def wrapped(*args):
        parts = tuple(each(split, a, s) for a, s in zip(args, in_tuple, strict=True))
        out = jax.vmap(body, axis_name=DATA_AXIS)(*parts)
        if isinstance(out_specs, tuple):
            return tuple(each(join, o, s) for o, s in zip(out, out_specs, strict=True))
        return each(join, out, out_specs)

    return wrapped
