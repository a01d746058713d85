"""Every method's prompts and answer forms together: each packaged template renders, is
packaged, names its parser and is fuzzed; nothing but ``ParseError`` escapes any parser."""

import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxmarl_llm.methods  # noqa: F401  (registers every method's prompt templates)
from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.parsers import ParseError
from jaxmarl_llm.methods.dpm.answers import parse_agent_ranking, parse_hash_choice
from jaxmarl_llm.methods.lca.answers import parse_pair_choice, parse_team_goal
from jaxmarl_llm.methods.verco.answers import parse_agent_messages
from jaxmarl_llm.methods.vgepf.answers import parse_next_option, parse_option
from jaxmarl_llm.methods.yolo.answers import parse_python_block
from tests.methods.answer_noise import (
    CASES,
    EMBEDDED,
    IN_WORDS,
    POOL,
    SIGNED_FRACTIONAL,
    UNICODE_DIGITS,
)

ROOT = Path(__file__).resolve().parents[2]
METHODS = ROOT / "jaxmarl_llm" / "methods"


# ----- the packaged templates -------------------------------------------------------------


def test_every_method_prompt_folder_is_registered_and_packaged():
    on_disk = {p.stem: p.parent.parent.name for p in METHODS.glob("*/prompts/*.txt")}
    assert set(templates.template_names()) == set(on_disk)
    for name, method in on_disk.items():
        assert templates.template_path(name) == METHODS / method / "prompts" / f"{name}.txt"
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    for method in set(on_disk.values()):
        assert "prompts/*.txt" in package_data.get(f"jaxmarl_llm.methods.{method}", []), method


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


# ----- every prompt's answer form is fuzzed (in test_<method>_answers.py) ---------------

FUZZED_FORMS = {
    "lca_pair_ranking": parse_pair_choice,
    "dpm_trajectory_comparison": parse_hash_choice,
    "dpm_episode_comparison": parse_hash_choice,
    "dpm_agent_ranking": parse_agent_ranking,
    "yolo_planning_function": parse_python_block,
    "yolo_reward_function": parse_python_block,
    "vgepf_skill_choice": parse_next_option,
    "verco_message": parse_agent_messages,
    "lca_team_goal": parse_team_goal,
}


def test_every_packaged_prompt_has_its_answer_form_fuzzed():
    for name in templates.template_names():
        parser, _ = templates.ANSWER_FORMS[name]
        if parser is str.strip:  # free text (YOLO's strategy) has no form to get wrong
            continue
        assert getattr(parser, "func", parser) is FUZZED_FORMS[name], name


@settings(max_examples=CASES, deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.sampled_from(
            [*SIGNED_FRACTIONAL, *EMBEDDED, *IN_WORDS, *UNICODE_DIGITS, "1", "2", "0", "#1", "#2",
             "Answer:", "Rank #1 : {1}", "Agent 1:", "Next Skill:", "```python\n", "```", "\n",
             " or ", " not ", "better", "worse", "pass", "shoot", "def planning_function(s):"]
        ),
        max_size=12,
    ).map("".join)
)  # fmt: skip
def test_only_parse_errors_escape_from_mixed_pieces(text):
    for parse in [
        parse_pair_choice,
        parse_hash_choice,
        lambda t: parse_agent_ranking(t, 2),
        lambda t: parse_python_block(t, "planning_function"),
        lambda t: parse_option(t, POOL),
        lambda t: parse_next_option(t, POOL),
        lambda t: parse_agent_messages(t, 2),
        parse_team_goal,
    ]:
        try:
            value = parse(text)
        except ParseError as e:
            assert e.raw == text and e.reason
            continue
        if parse in (parse_pair_choice, parse_hash_choice):
            assert value in (0.0, 0.5, 1.0)


_any_text = st.text(max_size=300)


@settings(max_examples=300, deadline=None)
@given(_any_text)
def test_fuzz_only_parse_errors_escape(text):
    parsers = [
        parse_pair_choice,
        parse_hash_choice,
        lambda t: parse_agent_ranking(t, 3),
        parse_python_block,
        lambda t: parse_python_block(t, "planning_function"),
        lambda t: parse_option(t, ["pass", "long pass", "shoot"]),
        lambda t: parse_agent_messages(t, 2),
    ]
    for parse in parsers:
        try:
            parse(text)
        except ParseError as e:
            assert e.raw == text and e.reason
