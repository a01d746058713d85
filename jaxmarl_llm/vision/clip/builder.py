"""``Builder``: our CLIP parameter tree filled from a checkpoint's tensors, each converted
and checked against the shape the config implies (the Hugging Face and OpenAI layouts
both fill one)."""

from __future__ import annotations

import numpy as np
from flax.traverse_util import unflatten_dict

from .config import CLIPConfig, CLIPWeightsError
from .model import Params, param_shapes


def flat_shapes(tree: Params, prefix: str = "") -> dict[str, tuple[int, ...]]:
    """The shape of every leaf of ``tree`` under its flat ``a/b/c`` name."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flat_shapes(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = tuple(v.shape)
    return out


class Builder:
    """Collects converted tensors under our flat ``a/b/c`` names, checking each shape."""

    def __init__(self, cfg: CLIPConfig, tensors: dict[str, np.ndarray]):
        self.expect = flat_shapes(param_shapes(cfg))
        self.tensors = tensors
        self.out: dict[str, np.ndarray] = {}
        self.used: set[str] = set()

    def _get(self, src: str, dst: str, conv, want: tuple[int, ...]) -> np.ndarray:
        if src not in self.tensors:
            raise CLIPWeightsError(f"CLIP checkpoint lacks tensor {src!r}")
        a = np.asarray(self.tensors[src], np.float32)
        a = conv(a) if conv is not None else a
        if a.shape != want:
            raise CLIPWeightsError(
                f"CLIP tensor {src!r} has shape {a.shape} after conversion to {dst!r}, "
                f"but the config implies {want}"
            )
        self.used.add(src)
        return a

    def put(self, dst: str, src: str, conv=None) -> None:
        self.out[dst] = self._get(src, dst, conv, self.expect[dst])

    def stack(self, dst: str, srcs: list[str], conv=None) -> None:
        """Per-layer tensors ``srcs`` stacked on a leading layer axis (for ``nn.scan``)."""
        arrs = [self._get(s, dst, conv, self.expect[dst][1:]) for s in srcs]
        self.out[dst] = np.ascontiguousarray(np.stack(arrs))

    def finish(self, ignore: tuple[str, ...] = ()) -> Params:
        unset = sorted(set(self.expect) - set(self.out))
        if unset:  # a mapping bug, not a user error
            raise AssertionError(f"CLIP parameters left unset: {unset}")
        unknown = sorted(k for k in self.tensors if k not in self.used and not k.endswith(ignore))
        if unknown:
            raise CLIPWeightsError(
                "CLIP checkpoint has tensors the config does not use (a config with fewer "
                f"layers or another architecture?): {unknown[:5]}"
            )
        return unflatten_dict(self.out, sep="/")
