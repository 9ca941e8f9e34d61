"""Session-wide test plugins (tests/support is on the pythonpath).

- ``tier_guard``: under CI or ``NWB_REQUIRE_ALL_TIERS=1`` a skipped test fails the run.
"""

pytest_plugins = ["tier_guard"]
