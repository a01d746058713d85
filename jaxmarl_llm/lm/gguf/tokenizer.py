"""What every GGUF family's tokenizer shares: encode/decode through a ``tokenizers``
tokenizer with the model's special ids, and the on-disk cache of the tokenizer each
family builds from its GGUF's ``tokenizer.ggml.*`` metadata."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Sequence

from .cache import cache_dir
from .errors import GGUFWeightsError


def require_tokenizers(error: type[GGUFWeightsError] = GGUFWeightsError):
    try:
        import tokenizers
    except ImportError as e:
        raise error.needs_package("tokenizers", f"for the {error.family} tokenizer") from e
    return tokenizers


def cached_tokenizer(
    tokenizers, path: pathlib.Path, name: str, build: Callable[[], str], cache=None
):
    """The ``tokenizers.Tokenizer`` cached as ``{name}-{size}-{mtime}.json`` for the GGUF at
    ``path`` (under ``cache`` or ``cache_dir()``), or ``build()``'s JSON text, stored
    atomically for next time (a broken entry is rebuilt; a read-only cache is skipped)."""
    st = path.stat()
    cache = cache or cache_dir()
    cached = cache / f"{name}-{st.st_size}-{st.st_mtime_ns}.json"
    if cached.is_file():
        try:
            return tokenizers.Tokenizer.from_file(str(cached))
        except Exception:  # noqa: BLE001 - rebuild a broken cache entry
            pass
    text = build()
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, cached)
    except OSError:
        pass
    return tokenizers.Tokenizer.from_str(text)


class GGUFTokenizer:
    """Encode/decode for a GGUF model; ``encode(text)`` prepends BOS when the model expects
    one (``add_bos``) unless told otherwise. ``end_of_turn_id`` is the first of
    ``end_of_turn_tokens`` the vocabulary has (None without any)."""

    def __init__(
        self,
        tokenizer,
        bos_id: int,
        eos_id: int,
        pad_id: int,
        add_bos: bool,
        end_of_turn_tokens: Sequence[str] = (),
    ):
        self._tok = tokenizer
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self.add_bos = add_bos
        ids = (tokenizer.token_to_id(t) for t in end_of_turn_tokens)
        self.end_of_turn_id = next((i for i in ids if i is not None), None)
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)

    def _bos(self, add_bos: bool | None) -> list[int]:
        return [self.bos_id] if (self.add_bos if add_bos is None else add_bos) else []

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        return self._bos(add_bos) + self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str], add_bos: bool | None = None) -> list[list[int]]:
        encs = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [self._bos(add_bos) + e.ids for e in encs]

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special)

    def id_to_token(self, i: int) -> str | None:
        return self._tok.id_to_token(i)
