"""Hypothesis profiles: `dev` (fast, the default), `ci` (`CI=true`: 100 examples a property,
the floor the suite keeps, so that the whole suite stays within CI's time on 2 cores) and
`mutate`.

`ci` is derandomized: the landing gate draws the same examples on every clean clone, so a
submission passes or fails for what it changed, never for the seed it drew. Exploration is
what `dev` runs do (random, with the example database); a failure found there is pinned with
`@example` or `@reproduce_failure` and then holds in CI too.

Select one with HYPOTHESIS_PROFILE=ci. None has a deadline: a slow example on a loaded
2-core machine is not a failure, and timing is measured by benchmarks/, not asserted here.
`mutate` is what scripts/mutate.py runs each mutant with: derandomized and without the
example database, so a mutant is killed or survives the same way whatever ran before it,
and without shrinking (a failing example is enough to call a mutant killed).
"""

import os

from hypothesis import HealthCheck, Phase, settings

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "ci", max_examples=100, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "mutate", max_examples=100, deadline=None, derandomize=True, database=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # killed is killed: no shrinking
    suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
