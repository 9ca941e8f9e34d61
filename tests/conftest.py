"""Session-wide test plugins (tests/support is on the pythonpath).

- ``tier_guard``: under CI or ``NWB_REQUIRE_ALL_TIERS=1`` a skipped test fails the run.
- Every reconcile pass in the tests, in process or in a controller they start, also observes
  every node afresh and fails if its incremental observation differs
  (``nodewright_bridge.controller.observing.VERIFY_ENV``).
"""

import os

os.environ.setdefault("NWB_VERIFY_OBSERVE", "1")

pytest_plugins = ["tier_guard"]
