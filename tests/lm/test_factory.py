"""make_backend: config names to backends, errors that name the bad key."""

import pytest

from jaxmarl_llm.lm.backend import Request
from jaxmarl_llm.lm.factory import make_backend
from jaxmarl_llm.lm.store import CachedBackend, CacheMiss


def test_scripted_backend_with_store_and_replay(tmp_path):
    store = tmp_path / "labels.sqlite"
    backend = make_backend(
        "scripted", teacher="pair_choice_hash", noise={"mistake": 0.0}, store=store
    )
    assert isinstance(backend, CachedBackend)
    request = Request("which?", payload={"value_a": 2.0, "value_b": 1.0})
    assert backend.generate([request])[0].text == "#1"
    replay = make_backend("scripted", teacher="pair_choice_hash", store=store, cache_mode="replay")
    assert replay.generate([request])[0].text == "#1"
    with pytest.raises(CacheMiss):
        replay.generate([Request("other", payload={"value_a": 0.0, "value_b": 1.0})])


@pytest.mark.parametrize(
    "kind, kwargs, message",
    [
        ("gpt", {}, r"unknown language-model backend 'gpt'; valid: \['scripted', 'gemma'"),
        ("scripted", {"teacher": "oracle"}, r"unknown scripted teacher 'oracle'"),
        ("scripted", {"noise": {"flip": 0.1}}, r"unknown teacher noise keys \['flip'\]"),
        ("scripted", {"noise": {"mistake": 2.0}}, r"TeacherNoise.mistake must be a probability"),
        ("scripted", {"cache_mode": "replay"}, r"cache_mode='replay' needs a label store"),
        ("http", {"base_url": "http://127.0.0.1:1/v1", "model": "m", "temprature": 0.1},
         r"bad options for the 'http' backend"),
    ],
)  # fmt: skip
def test_bad_configuration_is_named(kind, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_backend(kind, **kwargs)


def test_methods_register_their_scripted_teachers_on_import_and_a_clash_is_refused():
    import jaxmarl_llm.methods  # noqa: F401  (DPM's and V-GEPF's teachers)
    from jaxmarl_llm.lm import factory

    assert {"agent_ranking", "vgepf_skill"} <= set(factory.TEACHERS)
    known = factory.TEACHERS["agent_ranking"]
    factory.register_teacher("agent_ranking", known)  # the same factory again: no clash
    with pytest.raises(ValueError, match="'agent_ranking' is already registered"):
        factory.register_teacher("agent_ranking", lambda noise: None)
    backend = factory.make_backend("scripted", teacher="vgepf_skill")
    assert backend is not None
