"""Hypothesis profiles: `dev` (fast, the default) and `ci` (thorough).

Select one with HYPOTHESIS_PROFILE=ci. Neither has a deadline: a slow example on a loaded
2-core machine is not a failure, and timing is measured by benchmarks/, not asserted here.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
