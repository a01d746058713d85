"""GPT-2 style byte-level BPE tokenizer built from a GGUF's ``tokenizer.ggml.*`` metadata.

The GGUF (``tokenizer.ggml.model = "gpt2"``) carries the byte-level vocabulary, the merges
in rank order, token types (3 = control, 4 = user-defined) and a pre-tokenizer name
(``tokenizer.ggml.pre``), which picks how text is split before BPE:

- ``smollm`` (SmolLM/SmolLM2, StarCoder's): every digit alone, then GPT-2's split regex;
- ``gpt-2`` / ``default``: GPT-2's split regex;
- ``qwen2``: Qwen2's split regex (digits one by one, ``\\r\\n`` runs kept together).

Control and user-defined tokens (``<|im_start|>`` ...) are matched verbatim before BPE.
The result is cached as a ``tokenizers`` JSON under the weights cache directory.
"""

from __future__ import annotations

import os
import pathlib

from jaxmarl_llm.lm.gguf import GGUFTokenizer, cached_tokenizer, open_gguf, require_tokenizers

from .config import LlamaWeightsError

CONTROL, USER_DEFINED = 3, 4
TOKENIZER_FORMAT = 1
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZERS = ("smollm", "gpt-2", "default", "qwen2")
# The system turn SmolLM2-Instruct's chat template inserts when a conversation has none.
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def _string(reader, key, default=None):
    field = reader.fields.get(key)
    return bytes(field.parts[-1]).decode() if field is not None else default


def _pre_tokenizer(name: str):
    from tokenizers import Regex, pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if name == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if name in ("gpt-2", "default"):
        return byte_level
    if name == "qwen2":
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    raise LlamaWeightsError(
        f"unsupported GGUF pre-tokenizer {name!r}; supported: {list(PRE_TOKENIZERS)}"
    )


def build_tokenizer_json(gguf_path: str | os.PathLike, reader=None) -> str:
    """A ``tokenizers`` JSON for the GGUF's byte-level BPE; ``reader``: the file already
    opened with ``open_gguf``."""
    tokenizers = require_tokenizers(LlamaWeightsError)
    from tokenizers import AddedToken, decoders
    from tokenizers.models import BPE

    reader = reader if reader is not None else open_gguf(gguf_path, LlamaWeightsError)
    model = _string(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise LlamaWeightsError(
            f"unsupported GGUF tokenizer model {model!r}; the llama tokenizer reads 'gpt2' "
            "(byte-level BPE)"
        )
    f = reader.fields
    if "tokenizer.ggml.merges" not in f:
        raise LlamaWeightsError("GGUF lacks tokenizer.ggml.merges")
    pieces = f["tokenizer.ggml.tokens"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in f["tokenizer.ggml.merges"].contents()]
    vocab = {p: i for i, p in enumerate(pieces)}
    if len(vocab) != len(pieces):
        raise LlamaWeightsError("GGUF vocabulary has duplicate tokens")
    tok = tokenizers.Tokenizer(BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = _pre_tokenizer(_string(reader, "tokenizer.ggml.pre", "default"))
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [
            AddedToken(p, special=True, normalized=False)
            for p, t in zip(pieces, types, strict=True)
            if t == CONTROL
        ]
    )
    tok.add_tokens(
        [
            AddedToken(p, special=False, normalized=False)
            for p, t in zip(pieces, types, strict=True)
            if t == USER_DEFINED
        ]
    )
    if tok.get_vocab_size(with_added_tokens=True) != len(pieces):
        raise LlamaWeightsError("tokenizer vocabulary mismatch while building from GGUF")
    return tok.to_str()


class LlamaTokenizer(GGUFTokenizer):
    """A GGUF byte-level BPE: ``encode(text)`` prepends BOS when the model expects one
    (``add_bos`` from the metadata) unless told otherwise; turns end at ``<|im_end|>`` or
    ``<|eot_id|>``, whichever the vocabulary has."""

    def __init__(self, tokenizer, bos_id: int, eos_id: int, pad_id: int, add_bos: bool = False):
        super().__init__(tokenizer, bos_id, eos_id, pad_id, add_bos, ("<|im_end|>", "<|eot_id|>"))

    @classmethod
    def from_gguf(
        cls,
        gguf_path: str | os.PathLike,
        *,
        bos_id: int,
        eos_id: int,
        pad_id: int,
        add_bos: bool = False,
        cache: pathlib.Path | None = None,
        reader=None,
    ) -> LlamaTokenizer:
        tokenizers = require_tokenizers(LlamaWeightsError)
        path = pathlib.Path(gguf_path)
        if not path.is_file():
            open_gguf(path, LlamaWeightsError)  # raises the helpful error
        name = f"llama-tokenizer-{path.stem}-v{TOKENIZER_FORMAT}"
        tok = cached_tokenizer(
            tokenizers, path, name, lambda: build_tokenizer_json(path, reader), cache
        )
        return cls(tok, bos_id, eos_id, pad_id, add_bos)


def format_chat(
    user: str, system: str | None = None, default_system: str = SMOLLM2_DEFAULT_SYSTEM
) -> str:
    """One user turn in ChatML (SmolLM2-Instruct's and Qwen2's chat format), ending where
    the assistant's answer starts; ``system=None`` uses the template's default system turn."""
    system = default_system if system is None else system
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )
