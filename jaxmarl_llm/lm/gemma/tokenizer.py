"""Gemma 3 tokenizer built from the GGUF's own ``tokenizer.ggml.*`` metadata.

The GGUF carries a SentencePiece BPE vocabulary (``tokenizer.ggml.model = "llama"``):
pieces, scores and token types (1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte),
no merges. SentencePiece BPE repeatedly merges the adjacent pair whose *merged piece*
has the highest score; a ``tokenizers`` BPE applies the lowest-ranked merge first, so we
derive every merge ``(left, right)`` whose halves and result are normal pieces and rank
it by the result's score. Around that:

- normalizer: spaces become ``▁`` (Gemma 3 adds no dummy prefix: ``add_space_prefix`` is
  false in the metadata);
- user-defined pieces (runs of spaces/newlines/tabs, HTML tags) and control tokens
  (``<start_of_turn>`` ...) are matched verbatim before BPE, as SentencePiece does;
- unknown characters fall back to ``<0xNN>`` byte pieces;
- a BOS token is prepended when asked (Gemma expects one; ``add_bos_token`` is true).

Building takes a few seconds; the result is cached as a ``tokenizers`` JSON under the
weights cache directory (:func:`jaxmarl_llm.lm.gguf.cached_tokenizer`).
"""

from __future__ import annotations

import os
import pathlib

from jaxmarl_llm.lm.gguf import GGUFTokenizer, cached_tokenizer, open_gguf, require_tokenizers

from .config import GemmaWeightsError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
TOKENIZER_FORMAT = 1


def _read_vocab(reader):
    f = reader.fields
    if f.get("tokenizer.ggml.model") is not None:
        model = bytes(f["tokenizer.ggml.model"].parts[-1]).decode()
        if model != "llama":
            raise GemmaWeightsError(f"unsupported GGUF tokenizer model {model!r} (want 'llama')")
    toks, scores, types = (
        f["tokenizer.ggml.tokens"],
        f["tokenizer.ggml.scores"],
        f["tokenizer.ggml.token_type"],
    )
    pieces = [bytes(toks.parts[i]).decode("utf-8") for i in toks.data]
    score = [float(scores.parts[i][0]) for i in scores.data]
    ttype = [int(types.parts[i][0]) for i in types.data]
    return pieces, score, ttype


def build_tokenizer_json(gguf_path: str | os.PathLike, reader=None) -> str:
    """A ``tokenizers`` JSON equivalent to the GGUF's SentencePiece BPE model; ``reader``:
    the file already opened with ``open_gguf``."""
    tokenizers = require_tokenizers(GemmaWeightsError)
    from tokenizers import AddedToken, Regex, decoders, normalizers
    from tokenizers.models import BPE

    reader = reader if reader is not None else open_gguf(gguf_path, GemmaWeightsError)
    pieces, score, ttype = _read_vocab(reader)
    f = reader.fields

    def meta_int(key, default):
        return int(f[key].parts[-1][0]) if key in f else default

    unk_id = meta_int("tokenizer.ggml.unknown_token_id", 3)

    # Every piece keeps its text so ids line up. User-defined pieces made of spaces stay
    # verbatim: normalized text has no spaces, so BPE never produces them; they are
    # matched on the raw text before normalization instead.
    vocab: dict[str, int] = {}
    for i, p in enumerate(pieces):
        vocab[p if p not in vocab else f"<dup_{i}>"] = i
    normal = {p: i for i, p in enumerate(pieces) if ttype[i] == NORMAL}
    merges = []
    for piece, i in normal.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in normal and right in normal:
                merges.append((-score[i], i, normal[left], normal[right], left, right))
    merges.sort()
    model = BPE(
        vocab=vocab,
        merges=[(m[4], m[5]) for m in merges],
        unk_token=pieces[unk_id],
        fuse_unk=True,
        byte_fallback=True,
        ignore_merges=False,
    )
    tok = tokenizers.Tokenizer(model)
    tok.normalizer = normalizers.Replace(Regex(" "), "\u2581")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    specials, user = [], []
    for i, p in enumerate(pieces):
        if ttype[i] in (CONTROL, UNKNOWN):
            specials.append(AddedToken(p, special=True, normalized=False))
        elif ttype[i] == USER_DEFINED:
            user.append(AddedToken(p, special=False, normalized=False))
    tok.add_special_tokens(specials)
    tok.add_tokens(user)
    # add_tokens must not have appended anything: every added token is already in vocab.
    if tok.get_vocab_size(with_added_tokens=True) != len(pieces):
        raise GemmaWeightsError("tokenizer vocabulary mismatch while building from GGUF")
    return tok.to_str()


class GemmaTokenizer(GGUFTokenizer):
    """Gemma 3's tokenizer: ``encode(text)`` prepends BOS unless ``add_bos=False``; turns
    end at ``<end_of_turn>``."""

    def __init__(self, tokenizer, bos_id: int = 2, eos_id: int = 1, pad_id: int = 0):
        super().__init__(tokenizer, bos_id, eos_id, pad_id, True, ("<end_of_turn>",))

    @classmethod
    def from_gguf(
        cls,
        gguf_path: str | os.PathLike,
        *,
        bos_id: int = 2,
        eos_id: int = 1,
        pad_id: int = 0,
        cache: pathlib.Path | None = None,
        reader=None,
    ) -> GemmaTokenizer:
        """The tokenizer of ``gguf_path``, from the cache or built from the file's metadata
        (``reader``: the file already opened with ``open_gguf``, saving a second parse)."""
        tokenizers = require_tokenizers(GemmaWeightsError)
        path = pathlib.Path(gguf_path)
        if not path.is_file():
            open_gguf(path, GemmaWeightsError)  # raises the helpful error
        name = f"gemma3-tokenizer-{path.stem}-v{TOKENIZER_FORMAT}"
        tok = cached_tokenizer(
            tokenizers, path, name, lambda: build_tokenizer_json(path, reader), cache
        )
        return cls(tok, bos_id, eos_id, pad_id)
