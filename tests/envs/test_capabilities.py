"""The capability mechanism: declarations on registry entries and env classes, one lookup."""

import dataclasses

import jax
import pytest
from omegaconf import OmegaConf
from toy_envs import MaskedBandit, RaceLine

import envs
from envs.capabilities import (
    KINDS,
    FootballMatch,
    RankingHeuristic,
    Renderer,
    SceneDescriber,
    ScriptedIntents,
    ScriptedPolicy,
    SmaxUnits,
    StateDescriber,
    TextObservations,
    YoloTaskSet,
    declarations,
    provides,
)
from envs.football import Football
from jaxmarl_llm.shaping.registry import build_shaper

# what each method asks for; refusing an env is tested below through the shaper builders
EXPECTED = {
    "two_switch": {RankingHeuristic, StateDescriber, Renderer, ScriptedPolicy},
    "victim_rubble": {RankingHeuristic, StateDescriber, Renderer, ScriptedPolicy},
    "pistonball": {RankingHeuristic, StateDescriber, Renderer},
    "lbf:8x8-2p-2f-coop": {YoloTaskSet},
    "mpe:simple_spread": {YoloTaskSet},
    "mpe:simple_spread_jaxmarl": {YoloTaskSet},
    "smax:3m": {SmaxUnits, SceneDescriber, YoloTaskSet},
    "matrix:penalty": set(),
    "salad:A": {ScriptedPolicy, TextObservations},
    "salad:B": {ScriptedPolicy, TextObservations},
    "football:academy_counterattack_easy": {Renderer, FootballMatch, ScriptedIntents},
}


@pytest.mark.parametrize("name", envs.names())
def test_every_declared_capability_resolves_to_a_provider_of_its_kind(name):
    env = envs.make(name)
    declared = declarations(env)
    for kind in declared:
        assert isinstance(envs.capability(env, kind), kind), kind.__name__
    for kind in set(KINDS) - set(declared):
        assert envs.capability(env, kind) is None
    assert set(declared) == EXPECTED.get(name, set(declared))


def test_declarations_are_the_ones_methods_rely_on():
    assert envs.capability("lbf:8x8-2p-2f-coop", YoloTaskSet) == YoloTaskSet("lbf")
    assert envs.capability("mpe:simple_spread_jaxmarl", YoloTaskSet) == YoloTaskSet("spread")
    assert envs.capability("smax:2s3z", YoloTaskSet) == YoloTaskSet("smax")
    assert envs.providers(ScriptedPolicy) == ["salad:A", "salad:B", "two_switch", "victim_rubble"]
    smax = [n for n in envs.names() if n.startswith("smax:")]
    assert len(smax) > 1 and envs.providers(SmaxUnits) == smax
    football = [n for n in envs.names() if n.startswith("football:")]
    assert len(football) > 1 and envs.providers(ScriptedIntents) == football
    assert envs.providers(FootballMatch) == football
    for kind in KINDS:  # no kind is declared by nobody
        assert envs.providers(kind), kind.__name__


def test_lookup_sees_through_the_array_env_wrapper():
    aenv = envs.make_array_env("victim_rubble")
    assert envs.capability(aenv, ScriptedPolicy) is aenv.env
    assert envs.capability(aenv, YoloTaskSet) is None
    assert envs.require(aenv, RankingHeuristic, needed_by="x") is aenv.env
    smax = envs.make_array_env("smax:3m")
    describer = envs.capability(smax, SceneDescriber)
    assert describer.env is smax.env  # a provider computed from the raw env
    state = smax.env.reset(jax.random.PRNGKey(0))[1]
    assert "3 allies vs 3 enemies" in describer.scenario_info(state)


def test_the_registry_entry_decides_not_the_class():
    # one class, two entries: only the declaring entry's envs have the capability
    spec = envs.EnvSpec("test:bandit", MaskedBandit, "bandit with a task set")
    spec = dataclasses.replace(spec, capabilities=provides(YoloTaskSet("lbf")))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(envs.registry._REGISTRY, spec.name, spec)
        assert envs.capability(envs.make("test:bandit"), YoloTaskSet) == YoloTaskSet("lbf")
        assert envs.capability(MaskedBandit(), YoloTaskSet) is None
        assert envs.providers(YoloTaskSet)[-1] == "test:bandit"


def test_an_env_class_outside_the_registry_declares_on_itself():
    race = envs.ArrayEnv(RaceLine())
    assert envs.capability(race, RankingHeuristic) is race.env
    assert envs.capability(race, ScriptedPolicy) is None
    assert envs.capability(MaskedBandit(), RankingHeuristic) is None
    # a football env made without the registry, as the xT grid and CLIP scripts make them
    match = Football("academy_counterattack_easy")
    assert envs.capability(match, ScriptedIntents) is match
    assert envs.capability(match, ScriptedPolicy) is None


def test_a_declaration_the_env_does_not_implement_is_a_type_error():
    class Liar(RaceLine):
        capabilities = provides(ScriptedPolicy)  # RaceLine has no greedy_actions

    with pytest.raises(TypeError, match=r"Liar declares ScriptedPolicy .*\['greedy_actions'\]"):
        envs.capability(Liar(), ScriptedPolicy)
    with pytest.raises(TypeError, match="capability kinds or dataclass providers"):
        provides("render")


def test_require_names_the_env_the_capability_and_the_envs_that_have_it():
    with pytest.raises(ValueError) as e:
        envs.require(envs.make_array_env("mpe:simple_spread"), ScriptedPolicy, needed_by="me")
    assert str(e.value) == (
        "me needs an env with a scripted policy (greedy_actions) (ScriptedPolicy); "
        "'mpe:simple_spread' (FastSimpleSpread) lacks it. "
        "Environments with it: salad:*, two_switch, victim_rubble"
    )
    with pytest.raises(ValueError, match=r"^me needs .*; MaskedBandit lacks it\. .*\. Try x$"):
        envs.require(MaskedBandit(), RankingHeuristic, needed_by="me", hint="Try x")


@pytest.mark.parametrize(
    ("shaper", "env", "kind", "providers"),
    [
        ("lca", "mpe:simple_spread", "RankingHeuristic", "pistonball, two_switch, victim_rubble"),
        ("heuristic_potential", "smax:3m", "RankingHeuristic", "pistonball, two_switch"),
        ("individual", "lbf:8x8-2p-2f-coop", "RankingHeuristic", "pistonball, two_switch"),
        ("yolo", "pistonball", "YoloTaskSet", "lbf:8x8-2p-2f-coop, mpe:\\*, smax:\\*"),
        ("dpm", "two_switch", "SmaxUnits", "smax:\\*"),
        ("xt", "smax:3m", "FootballMatch", "football:\\*"),
        ("vgepf", "mpe:simple_spread", "FootballMatch", "football:\\*"),
    ],
)
def test_a_method_is_refused_on_an_env_without_its_capability(shaper, env, kind, providers):
    cfg = OmegaConf.create({"name": shaper, "kwargs": {}, "mode": "add", "coef": 1.0})
    aenv = envs.make_array_env(env)
    label = f"'{env}' \\({type(aenv.env).__name__}\\)"
    with pytest.raises(ValueError, match=f"needs an env with .*\\({kind}\\); {label} lacks it\\. "):
        build_shaper(cfg, aenv)
    with pytest.raises(ValueError, match=f"Environments with it: {providers}"):
        build_shaper(cfg, aenv)


def test_importing_envs_keeps_the_importers_stdout_and_stderr():
    """jaxmarl's own import sets both streams back to the process's originals."""
    import subprocess
    import sys

    code = (
        "import io, sys; out, err = io.StringIO(), io.StringIO(); "
        "sys.stdout, sys.stderr = out, err; import envs; "
        "assert sys.stdout is out and sys.stderr is err, 'streams replaced'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
