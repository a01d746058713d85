"""The one-pass GGUF reader builds exactly the fields ``gguf.GGUFReader`` builds."""

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from jaxmarl_llm.lm.gguf import read_gguf  # noqa: E402


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "fields.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.name", "tiny ü")
    w.add_uint32("llama.block_count", 2)
    w.add_float32("llama.rope.freq_base", 10000.5)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_int64("some.int64", -(2**40))
    w.add_uint8("some.uint8", 7)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "", "▁hello", "東京", "a b"])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.5, 2.25, 3.0, -0.125])
    w.add_array("tokenizer.ggml.token_type", [3, 1, 1, 1, 1])
    w.add_array("empty.array", [])
    w.add_array("nested.array", [[1, 2], [3]])
    w.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_fields_and_tensors_equal_the_librarys(path):
    ours, theirs = read_gguf(path), gguf.GGUFReader(str(path), "r")
    assert list(ours.fields) == list(theirs.fields)
    for name, field in theirs.fields.items():
        mine = ours.fields[name]
        assert (mine.offset, mine.data, mine.types) == (field.offset, field.data, field.types)
        assert len(mine.parts) == len(field.parts), name
        for a, b in zip(mine.parts, field.parts, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b), name
        if name != "nested.array":  # the library's contents() flattens nested arrays
            assert mine.contents() == field.contents(), name
    assert ours.fields["tokenizer.ggml.tokens"].contents() == ["<s>", "", "▁hello", "東京", "a b"]
    assert ours.fields["tokenizer.ggml.scores"].contents()[2] == 2.25
    assert ours.fields["general.name"].contents() == "tiny ü"
    assert [t.name for t in ours.tensors] == ["token_embd.weight"]
    np.testing.assert_array_equal(ours.tensors[0].data, theirs.tensors[0].data)
    assert ours.data_offset == theirs.data_offset


def test_a_file_that_is_no_gguf_is_refused(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="GGUF magic invalid"):
        read_gguf(bad)
