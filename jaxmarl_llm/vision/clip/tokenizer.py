"""CLIP's byte-level BPE tokenizer, built with the ``tokenizers`` library.

Same pipeline as OpenAI's ``simple_tokenizer`` (and transformers' fast CLIP tokenizer):
NFC, whitespace runs -> one space, strip, lower-case; split into contractions, letter
runs, single digits and punctuation runs; byte-level alphabet; BPE whose word-final
pieces end in ``</w>``. ``encode`` wraps the ids in ``<|startoftext|>`` ...
``<|endoftext|>`` and pads with 0 (as ``clip.tokenize`` does) or truncates to the context
length, keeping ``<|endoftext|>`` as the last token. Padding after the end-of-text token
cannot change the text embedding: the mask is causal and pooling reads that token.
"""

from __future__ import annotations

import gzip
import json
import pathlib

import numpy as np

from .config import CLIPWeightsError

BOS = "<|startoftext|>"
EOS = "<|endoftext|>"
OPENAI_BPE = "bpe_simple_vocab_16e6.txt.gz"
SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


def _require_tokenizers():
    try:
        import tokenizers
    except ImportError as e:
        raise CLIPWeightsError(
            "the `tokenizers` package is needed for the CLIP tokenizer; pip install tokenizers"
        ) from e
    return tokenizers


def build_bpe(vocab: dict[str, int], merges: list[tuple[str, str]]):
    """A ``tokenizers.Tokenizer`` with CLIP's normalisation, pre-tokenisation and BPE."""
    tk = _require_tokenizers()
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers

    tok = tk.Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            continuing_subword_prefix="",
            end_of_word_suffix="</w>",
            fuse_unk=False,
            unk_token=EOS,
        )
    )
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.NFC(),
            normalizers.Replace(Regex(r"\s+"), " "),
            normalizers.Strip(),
            normalizers.Lowercase(),
        ]
    )
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([BOS, EOS])
    return tok


class CLIPTokenizer:
    """Text -> ``[B, context_length]`` int32 CLIP token ids."""

    def __init__(self, tokenizer, context_length: int):
        self._tok = tokenizer
        self.context_length = context_length
        self.bos_id = tokenizer.token_to_id(BOS)
        self.eos_id = tokenizer.token_to_id(EOS)
        if self.bos_id is None or self.eos_id is None:
            raise CLIPWeightsError(f"CLIP vocabulary lacks {BOS!r} or {EOS!r}")

    @classmethod
    def from_files(cls, vocab_file, merges_file, context_length: int) -> CLIPTokenizer:
        vocab = json.loads(pathlib.Path(vocab_file).read_text(encoding="utf-8"))
        merges = []
        for line in pathlib.Path(merges_file).read_text(encoding="utf-8").splitlines():
            if not line.strip() or line.startswith("#version"):
                continue
            a, b = line.split()
            merges.append((a, b))
        return cls(build_bpe(vocab, merges), context_length)

    @classmethod
    def from_openai_bpe(cls, path, context_length: int) -> CLIPTokenizer:
        """From OpenAI's ``bpe_simple_vocab_16e6.txt.gz`` (merges only; the vocabulary is
        the 256 byte symbols, the same with ``</w>``, one entry per merge, then the two
        special tokens, as in OpenAI's ``simple_tokenizer``)."""
        with gzip.open(path, "rt", encoding="utf-8") as f:
            text = f.read()
        lines = text.split("\n")[1 : 49152 - 256 - 2 + 1]  # OpenAI's slice; header first
        merges = [tuple(line.split()) for line in lines if line.strip()]
        symbols = list(bytes_to_unicode().values())
        words = symbols + [v + "</w>" for v in symbols] + ["".join(m) for m in merges]
        vocab = {w: i for i, w in enumerate([*words, BOS, EOS])}
        return cls(build_bpe(vocab, merges), context_length)

    @classmethod
    def from_directory(
        cls, directory, context_length: int, missing_ok: bool = False
    ) -> CLIPTokenizer | None:
        """From ``vocab.json`` + ``merges.txt`` (preferred), OpenAI's BPE file, or
        ``tokenizer.json``."""
        d = pathlib.Path(directory)
        if (d / "vocab.json").is_file() and (d / "merges.txt").is_file():
            return cls.from_files(d / "vocab.json", d / "merges.txt", context_length)
        if (d / OPENAI_BPE).is_file():
            return cls.from_openai_bpe(d / OPENAI_BPE, context_length)
        if (d / "tokenizer.json").is_file():
            tk = _require_tokenizers()
            return cls(tk.Tokenizer.from_file(str(d / "tokenizer.json")), context_length)
        if missing_ok:
            return None
        raise CLIPWeightsError(
            f"{d} has no CLIP tokenizer files (vocab.json + merges.txt, {OPENAI_BPE} "
            "or tokenizer.json)"
        )

    def encode_one(self, text: str) -> list[int]:
        """Ids of ``text`` with ``<|startoftext|>``/``<|endoftext|>``, neither padded nor cut."""
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids, self.eos_id]

    def __call__(self, texts: str | list[str]) -> np.ndarray:
        """``[B, context_length]`` int32; over-long texts end with ``<|endoftext|>``."""
        if isinstance(texts, str):
            texts = [texts]
        out = np.zeros((len(texts), self.context_length), np.int32)  # [B, C], 0 = padding
        for row, text in enumerate(texts):
            ids = self.encode_one(text)[: self.context_length]
            ids[-1] = self.eos_id
            out[row, : len(ids)] = ids
        return out

    def decode(self, ids) -> str:
        """Text of ``ids`` up to ``<|endoftext|>`` (the padding after it is not text)."""
        pieces = []
        for i in (int(i) for i in ids):
            if i == self.eos_id:
                break
            if i != self.bos_id:
                pieces.append(i)
        text = self._tok.decode(pieces, skip_special_tokens=True)
        return text.replace("</w>", " ").strip()
