"""Prompt templates: every packaged one renders, names its parser, and rejects drift."""

import re

import pytest

from jaxmarl_llm.lm import templates


def test_every_template_renders_and_has_an_answer_form():
    names = templates.template_names()
    assert set(names) == set(templates.ANSWER_FORMS)
    for name in names:
        fields = templates.template_fields(name)
        assert fields, name
        text = templates.render(name, **{f: f"<{f}>" for f in fields})
        assert all(f"<{f}>" in text for f in fields)
        assert not re.search(r"\$[A-Za-z_{]", text), f"{name} left a placeholder"


def test_paper_answer_formats_are_in_the_prompts():
    def blank(name):
        return templates.render(name, **{f: "" for f in templates.template_fields(name)})

    assert "output #1" in blank("dpm_trajectory_comparison")
    assert "Rank #2 : {1,2}" in blank("dpm_agent_ranking")
    assert '"ego"' in blank("lca_pair_ranking") and "0 if they are equally good" in blank(
        "lca_pair_ranking"
    )
    assert "def planning_function(processed_state)" in blank("yolo_planning_function")


def test_missing_and_unexpected_fields_are_named():
    fields = {f: "x" for f in templates.template_fields("lca_pair_ranking")}
    fields.pop("state_2")
    with pytest.raises(ValueError, match=r"missing \['state_2'\]; unexpected \['stat_2'\]"):
        templates.render("lca_pair_ranking", stat_2="x", **fields)


def test_unknown_template_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown prompt template 'lca'.*lca_pair_ranking"):
        templates.render("lca")


def test_templates_from_a_user_directory(tmp_path):
    (tmp_path / "mine.txt").write_text("Rank $what from $who.")
    assert templates.template_names(tmp_path) == ["mine"]
    assert templates.render("mine", directory=tmp_path, what="pairs", who="ego") == (
        "Rank pairs from ego."
    )
