"""LoRA adapters kept as their own pytree over a frozen decoder's parameters.

The project's decoder (:class:`jaxmarl_llm.lm.decoder.Decoder`, every model family) stores
its attention projections as layer-stacked Dense kernels
``params["layers"]["attn"][name]["kernel"]`` of shape ``[L, d_in, d_out]``. An adapter
holds, per targeted projection, ``a: [K, d_in, r]`` and ``b: [K, r, d_out]`` for the top
``K`` of the ``L`` blocks (``K = L``: every block); :func:`merge_lora` returns the
parameters with ``W + (alpha / r) a @ b`` on those blocks, so one model serves any number
of adapter sets (Verco's message and action adapters share one base).
:func:`parse_lora_layers` reads the ``all | last:K`` setting.

Only adapters (and whatever small heads sit next to them) go into optimiser state and
checkpoints: :func:`save_adapters` / :func:`load_adapters` write and read such a tree.
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import struct

Params = Mapping[str, Any]


@struct.dataclass
class LoraAdapter:
    """Low-rank updates for some of a decoder's attention projections.

    ``a[name]``: ``[K, d_in, rank]``; ``b[name]``: ``[K, rank, d_out]`` for the top ``K``
    blocks. ``alpha`` is static
    (not a leaf), so optimisers and checkpoints only ever see the two factor trees.
    """

    a: dict[str, jax.Array]
    b: dict[str, jax.Array]
    alpha: float = struct.field(pytree_node=False, default=16.0)

    @property
    def rank(self) -> int:
        return next(iter(self.a.values())).shape[-1]

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    @property
    def n_layers(self) -> int:
        return next(iter(self.a.values())).shape[0]


def parse_lora_layers(value: str, n_layers: int | None, key: str = "algo.lora_layers") -> int:
    """How many top blocks ``value`` adapts: ``"all"`` (``n_layers``) or ``"last:K"``
    with ``K`` in ``1..n_layers``; anything else raises ``ValueError`` naming ``key``.
    ``n_layers=None`` checks the form alone (``"all"`` gives 0)."""
    value = str(value).strip()
    if value == "all":
        return n_layers or 0
    count = value.removeprefix("last:")
    top = n_layers if n_layers is not None else float("inf")
    if count != value and count.isdigit() and 1 <= int(count) <= top:
        return int(count)
    blocks = f"1..{n_layers} (the model's blocks)" if n_layers is not None else "1 or more"
    raise ValueError(
        f"bad value for config key '{key}': {value!r}; give 'all' or 'last:K' with K in {blocks}"
    )


def attention_kernel(base_params: Params, target: str) -> jax.Array:
    """The layer-stacked ``[L, d_in, d_out]`` kernel of attention projection ``target``."""
    attn = base_params["layers"]["attn"]
    if target not in attn:
        raise ValueError(
            f"no attention projection {target!r} to adapt; the model has {sorted(attn)}"
        )
    return attn[target]["kernel"]


def init_lora(
    rng: jax.Array,
    base_params: Params,
    targets: Sequence[str] = ("q", "v"),
    rank: int = 8,
    alpha: float = 16.0,
    dtype: Any = jnp.float32,
    layers: int | None = None,
) -> LoraAdapter:
    """A fresh adapter on the top ``layers`` blocks (``None``: all): ``b = 0`` (the merged
    model starts as the base model) and ``a`` uniform in ``±1/sqrt(d_in)`` (PEFT's
    ``kaiming_uniform_(a=sqrt(5))`` on LoRA-A)."""
    a, b = {}, {}
    for key, target in zip(jax.random.split(rng, len(targets)), targets, strict=True):
        total, d_in, d_out = attention_kernel(base_params, target).shape
        n_layers = total if layers is None else layers
        if not 1 <= n_layers <= total:
            raise ValueError(f"an adapter on {n_layers} blocks; the model has 1..{total}")
        bound = 1.0 / math.sqrt(d_in)
        a[target] = jax.random.uniform(key, (n_layers, d_in, rank), dtype, -bound, bound)
        b[target] = jnp.zeros((n_layers, rank, d_out), dtype)
    return LoraAdapter(a=a, b=b, alpha=float(alpha))


def lora_delta(lora: LoraAdapter, target: str) -> jax.Array:
    """``(alpha / r) a @ b`` for one projection, ``[L, d_in, d_out]``."""
    return jnp.einsum("lir,lro->lio", lora.a[target], lora.b[target]) * lora.scale


def merge_lora(base_params: Params, lora: LoraAdapter) -> dict[str, Any]:
    """The base parameters with the adapter's updates added to its target kernels.

    The adapter's ``K`` blocks are the top ``K`` of the kernels' stack, so ``base_params``
    may be the whole model or the top blocks alone (:func:`~jaxmarl_llm.lm.decoder.model.
    slice_layers`). The base is wrapped in ``stop_gradient``: differentiating through the merged
    parameters reaches the adapter only, even if a caller differentiates the base too.
    """
    base = jax.lax.stop_gradient(dict(base_params))
    attn = dict(base["layers"]["attn"])
    for target in lora.a:
        kernel = attention_kernel(base, target)
        delta = lora_delta(lora, target).astype(kernel.dtype)
        below = kernel.shape[0] - delta.shape[0]
        if below < 0:
            raise ValueError(
                f"an adapter on {delta.shape[0]} blocks does not fit {kernel.shape[0]} blocks"
            )
        merged = kernel + delta if below == 0 else kernel.at[below:].add(delta)
        attn[target] = {**attn[target], "kernel": merged}
    return {**base, "layers": {**base["layers"], "attn": attn}}


def parameter_count(tree: Any) -> int:
    return sum(int(x.size) for x in jax.tree.leaves(tree))


def parameter_bytes(tree: Any) -> int:
    return sum(int(x.size) * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


_STRUCTURE_FILE = "structure.json"


def _structure(tree: Any) -> str:
    # The treedef's text names every dict key, dataclass type and static field (an
    # adapter's alpha), so a checkpoint restored into another layout is refused.
    return str(jax.tree.structure(tree))


def save_adapters(path: str | pathlib.Path, tree: Any) -> None:
    """Write an adapter tree (adapters, value head, ...) to the new folder ``path``."""
    path = pathlib.Path(path).absolute()
    path.mkdir(parents=True, exist_ok=False)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path / "arrays", tree)
    checkpointer.wait_until_finished()
    (path / _STRUCTURE_FILE).write_text(json.dumps({"structure": _structure(tree)}))


def load_adapters(path: str | pathlib.Path, like: Any) -> Any:
    """The tree saved at ``path``, restored into ``like``'s structure (same keys, static
    fields, shapes and dtypes; a mismatch raises ``ValueError`` naming the difference)."""
    path = pathlib.Path(path).absolute()
    saved = json.loads((path / _STRUCTURE_FILE).read_text())["structure"]
    if saved != _structure(like):
        raise ValueError(
            f"{path} holds adapters of another layout:\n saved: {saved}\n wanted: "
            f"{_structure(like)}"
        )
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    restored = ocp.StandardCheckpointer().restore(path / "arrays", abstract)
    for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(like), strict=True):
        if got.shape != want.shape or got.dtype != want.dtype:
            raise ValueError(
                f"{path}: an array is {got.shape} {got.dtype}, wanted {want.shape} {want.dtype}"
            )
    return restored
