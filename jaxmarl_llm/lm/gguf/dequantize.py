"""GGUF tensors (Q4_K, Q5_0, Q6_K, Q8_0, F32, ...) to float32 numpy arrays, with the
``gguf`` package's numpy kernels."""

from __future__ import annotations

import numpy as np

from .errors import GGUFWeightsError
from .reader import require_gguf


def dequantize(tensor, error: type[GGUFWeightsError] = GGUFWeightsError) -> np.ndarray:
    """One tensor of a parsed GGUF, float32, in numpy axis order (GGUF lists the fastest
    axis first, so a projection ``[out, in]`` is torch's ``nn.Linear`` layout)."""
    gguf = require_gguf(error)
    data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    shape = tuple(int(s) for s in reversed(tensor.shape))
    return np.asarray(data, dtype=np.float32).reshape(shape)
