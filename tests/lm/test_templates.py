"""Prompt templates: found by name once a package registers them, or read from a folder of
your own; ``render`` rejects drift. (Every method's packaged templates are checked in
``tests/methods/test_answer_forms.py``.)"""

import sys

import pytest

from jaxmarl_llm.lm import templates


@pytest.fixture
def registry(monkeypatch):
    """The template registry, emptied for one test and restored after it."""
    monkeypatch.setattr(templates, "ANSWER_FORMS", {})
    monkeypatch.setattr(templates, "_PACKAGE_OF", {})
    return templates


@pytest.fixture
def make_package(tmp_path, monkeypatch):
    """``make_package(name, {template: text})``: an importable package with those prompts."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(name, prompts):
        folder = tmp_path / name
        (folder / "prompts").mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        for stem, text in prompts.items():
            (folder / "prompts" / f"{stem}.txt").write_text(text)
        monkeypatch.delitem(sys.modules, name, raising=False)
        return name

    return make


def test_registered_templates_are_found_by_name(registry, make_package):
    package = make_package("tpl_pkg_a", {"ask_pair": "Is $a better than $b?"})
    registry.register(package, {"ask_pair": (str.strip, "text")})
    assert registry.template_names() == ["ask_pair"]
    assert registry.ANSWER_FORMS["ask_pair"] == (str.strip, "text")
    assert registry.template_fields("ask_pair") == ["a", "b"]
    assert registry.render("ask_pair", a=1, b="x") == "Is 1 better than x?"
    registry.register(package, {"ask_pair": (str.lower, "text")})  # again: replaced
    assert registry.ANSWER_FORMS["ask_pair"] == (str.lower, "text")


def test_missing_and_unexpected_fields_are_named(registry, make_package):
    registry.register(
        make_package("tpl_pkg_b", {"pair": "$state_1 vs $state_2"}), {"pair": (str, "")}
    )
    with pytest.raises(ValueError, match=r"missing \['state_2'\]; unexpected \['stat_2'\]"):
        registry.render("pair", state_1="x", stat_2="x")


def test_unknown_template_lists_the_registered_ones(registry, make_package):
    with pytest.raises(ValueError, match=r"unknown prompt template 'pair'; valid: \(none\)"):
        registry.render("pair")
    registry.register(
        make_package("tpl_pkg_c", {"pair_ranking": "$x"}), {"pair_ranking": (str, "")}
    )
    with pytest.raises(ValueError, match=r"unknown prompt template 'pair'; valid: pair_ranking"):
        registry.render("pair")


def test_a_package_registers_exactly_its_prompt_files(registry, make_package):
    package = make_package("tpl_pkg_d", {"one": "$x", "two": "$y"})
    with pytest.raises(ValueError, match=r"no answer form for its prompt templates \['two'\]"):
        registry.register(package, {"one": (str, "")})
    with pytest.raises(ValueError, match=r"registers prompt templates \['three'\] not in"):
        registry.register(package, {"one": (str, ""), "two": (str, ""), "three": (str, "")})
    assert registry.template_names() == []


def test_a_template_name_belongs_to_one_package(registry, make_package):
    registry.register(make_package("tpl_pkg_e", {"ask": "$x"}), {"ask": (str, "")})
    other = make_package("tpl_pkg_f", {"ask": "$y"})
    with pytest.raises(ValueError, match=r"already registered: \{'ask': 'tpl_pkg_e'\}"):
        registry.register(other, {"ask": (str, "")})
    assert registry.template_fields("ask") == ["x"]


def test_templates_from_a_user_directory(tmp_path):
    (tmp_path / "mine.txt").write_text("Rank $what from $who.")
    assert templates.template_names(tmp_path) == ["mine"]
    assert templates.render("mine", directory=tmp_path, what="pairs", who="ego") == (
        "Rank pairs from ego."
    )


def test_unknown_template_in_a_user_directory_lists_its_files(tmp_path):
    (tmp_path / "mine.txt").write_text("Rank $what from $who.")
    with pytest.raises(ValueError, match=r"unknown prompt template 'theirs' in .*; valid: mine"):
        templates.render("theirs", directory=tmp_path)
