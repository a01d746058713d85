"""Every registered environment passes the conformance suite in ``conformance.py``.

All envs get the static (traced) checks. The full, compiled checks run on one
representative per env implementation (envs whose factories share a function differ
only in sizes or layouts); ``pytest --all-envs`` runs them on every env.
"""

import functools

import pytest
from conformance import check_env_conformance, check_env_static_conformance

import envs

SHORT_EPISODE = 8  # max_steps for envs whose factory accepts it
# Envs whose start state is fixed by design, so reset may ignore its key: matrix games, and
# GRF's academy files, which place every player exactly.
FIXED_START_PREFIXES = ("matrix:", "football:academy_")
PREFERRED_REPRESENTATIVES = (
    "mpe:simple_spread_3",
    "overcooked:cramped_room",
    "smax:2s3z",
    "football:academy_counterattack_easy",  # 4 controlled players: compiles faster than 11
)


def _implementation(name: str):
    factory = envs.spec(name).factory
    return getattr(factory, "func", factory)  # functools.partial(make, map_name) -> make


def representatives() -> set[str]:
    by_impl: dict = {}
    for name in envs.names():
        by_impl.setdefault(_implementation(name), []).append(name)
    reps = set()
    for members in by_impl.values():
        preferred = [n for n in members if n in PREFERRED_REPRESENTATIVES]
        reps.add((preferred or members)[0])
    return reps


@functools.cache
def short_kwargs(name: str) -> dict:
    try:
        envs.make(name, max_steps=SHORT_EPISODE)
    except ValueError:
        return {}
    return {"max_steps": SHORT_EPISODE}


@pytest.mark.parametrize("name", envs.names())
def test_static_conformance(name):
    check_env_static_conformance(name, **short_kwargs(name))


# full checks that run with the slow tests: jaxmarl's Overcooked, whose layouts, soups and
# episode timing tests/envs/test_overcooked.py checks in the suite
SLOW_FULL_CHECKS = ("overcooked:cramped_room",)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_FULL_CHECKS else n for n in envs.names()],
)
def test_conformance(name, request):
    if name not in representatives() and not request.config.getoption("--all-envs"):
        pytest.skip("same implementation as a checked env; run with --all-envs")
    check_env_conformance(
        name,
        reset_uses_key=not name.startswith(FIXED_START_PREFIXES),
        **short_kwargs(name),
    )


def test_every_env_has_a_full_check():
    reps = representatives()
    assert reps <= set(envs.names())
    for name in envs.names():
        assert any(_implementation(r) is _implementation(name) for r in reps), name
    assert set(PREFERRED_REPRESENTATIVES) <= reps
