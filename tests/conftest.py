"""Shared pytest configuration. Keep each addition small and in its own section."""

# ----- tests/envs: conformance of every registered environment ----------------------------


def pytest_addoption(parser):
    parser.addoption(
        "--all-envs",
        action="store_true",
        default=False,
        help="run the full (compiled) env conformance check on every registered env, not "
        "only on one representative per env implementation",
    )
