"""Reading a GGUF file: ``gguf.GGUFReader`` with its metadata read in one pass, opened
with errors that name the fix, and its scalar metadata as a dict.

``gguf.GGUFReader`` reads every element of a metadata array through its own memmap
slice: the Gemma 3 file's 262,144-token vocabulary (tokens, scores and types, 786k
elements) takes it about 25 s on a 2-core CPU, far longer than dequantizing the weights.
This reader builds the same ``ReaderField`` parts from plain ``np.frombuffer`` views (under
a second) and leaves tensors, and any field of a shape it does not handle (nested arrays,
a file of the other byte order), to the library.
"""

from __future__ import annotations

import functools
import os
import pathlib
from typing import Any

import numpy as np

from .errors import GGUFWeightsError

# Vocabulary arrays: large, and read by the tokenizers from the reader itself.
VOCABULARY_FIELDS = (
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
)


def read_gguf(path: str | os.PathLike):
    """The parsed GGUF file at ``path`` (a ``gguf.GGUFReader``)."""
    return _reader_class()(str(path), "r")


def require_gguf(error: type[GGUFWeightsError] = GGUFWeightsError):
    try:
        import gguf
    except ImportError as e:
        raise error.needs_package("gguf", f"to read {error.family} weights") from e
    return gguf


def open_gguf(path: str | os.PathLike, error: type[GGUFWeightsError] = GGUFWeightsError):
    """The parsed GGUF at ``path``; a missing or unreadable file raises ``error``, whose
    message names the file and the fix."""
    require_gguf(error)
    path = pathlib.Path(path)
    if not path.is_file():
        raise error.missing(path)
    try:
        return read_gguf(path)
    except Exception as e:  # noqa: BLE001 - re-raised with the fix
        raise error.unreadable(path, e) from e


def read_metadata(reader) -> dict[str, Any]:
    """Scalar/string metadata (vocabulary arrays are skipped; ``_vocab_size`` counts the
    tokens, or the embedding's rows where the file has no vocabulary)."""
    meta = {
        key: _field_value(field)
        for key, field in reader.fields.items()
        if key not in VOCABULARY_FIELDS
    }
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    meta["_vocab_size"] = len(tokens.data) if tokens is not None else None
    if meta["_vocab_size"] is None:
        for t in reader.tensors:
            if t.name == "token_embd.weight":
                meta["_vocab_size"] = int(t.shape[-1])
    return meta


def _field_value(field) -> Any:
    try:
        return field.contents()
    except Exception:  # noqa: BLE001 - older gguf: decode by hand
        parts = [field.parts[i] for i in field.data]
        vals = [bytes(p).decode("utf-8", "replace") if p.dtype == np.uint8 else p[0] for p in parts]
        return vals if len(vals) != 1 else vals[0]


@functools.cache
def _reader_class():
    import gguf
    from gguf import GGUFValueType

    class FastGGUFReader(gguf.GGUFReader):
        def _build_fields(self, offs: int, count: int) -> int:
            if self.byte_order != "I":
                return super()._build_fields(offs, count)
            buf = memoryview(self.data)
            for _ in range(count):
                orig = offs
                klen, key = _string(buf, offs)
                offs += 8 + int(klen[0])
                raw_type = np.frombuffer(buf[offs : offs + 4], np.uint32)
                offs += 4
                parsed = _value(self, buf, offs, int(raw_type[0]))
                if parsed is None:  # nested arrays: the library's way
                    size, parts, idxs, types = self._get_field_parts(offs, raw_type[0])
                else:
                    size, parts, idxs, types = parsed
                head = [klen, key, raw_type]
                self._push_field(
                    gguf.ReaderField(
                        orig,
                        key.tobytes().decode("utf-8"),
                        head + parts,
                        [i + len(head) for i in idxs],
                        types,
                    ),
                    skip_sum=True,
                )
                offs += size
            return offs

    def _value(reader, buf, offs: int, raw_type: int):
        """``(size, parts, data indexes, types)`` as the library builds them, or None."""
        gtype = GGUFValueType(raw_type)
        if gtype == GGUFValueType.STRING:
            slen, data = _string(buf, offs)
            return 8 + int(slen[0]), [slen, data], [1], [gtype]
        scalar = reader.gguf_scalar_to_np.get(gtype)
        if scalar is not None:
            size = np.dtype(scalar).itemsize
            return size, [np.frombuffer(buf[offs : offs + size], scalar)], [0], [gtype]
        if gtype != GGUFValueType.ARRAY:
            raise ValueError(f"Unknown/unhandled field type {gtype}")
        item_type = np.frombuffer(buf[offs : offs + 4], np.uint32)
        length = np.frombuffer(buf[offs + 4 : offs + 12], np.uint64)
        n = int(length[0])
        start = offs + 12
        itype = GGUFValueType(int(item_type[0]))
        head = [item_type, length]
        if itype == GGUFValueType.STRING:
            parts, pos = [], start
            for _ in range(n):
                slen, data = _string(buf, pos)
                parts += [slen, data]
                pos += 8 + int(slen[0])
            idxs = list(range(len(head) + 1, len(head) + 2 * n, 2))
            return pos - offs, head + parts, idxs, [gtype, itype] if n else [gtype]
        scalar = reader.gguf_scalar_to_np.get(itype)
        if scalar is None:
            return None
        size = np.dtype(scalar).itemsize
        values = np.frombuffer(buf[start : start + n * size], scalar)
        parts = [values[i : i + 1] for i in range(n)]
        idxs = list(range(len(head), len(head) + n))
        return 12 + n * size, head + parts, idxs, [gtype, itype] if n else [gtype]

    return FastGGUFReader


def _string(buf, offs: int) -> tuple[np.ndarray, np.ndarray]:
    """A GGUF string at ``offs``: its uint64 length and its uint8 bytes."""
    slen = np.frombuffer(buf[offs : offs + 8], np.uint64)
    return slen, np.frombuffer(buf[offs + 8 : offs + 8 + int(slen[0])], np.uint8)
