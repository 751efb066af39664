"""What `mesh verify` says about one thing it checked: a binding, a provider's admin, a node's
registry account. One status each (STATUSES, or requires-nothing); `ok` and warnings do not
fail a verify, everything else does. Results carry names and generations, never a secret."""

from __future__ import annotations

from typing import Optional

import attrs

from executors.node.provisioners.base import AUTH_FAILED, MISSING, OK, UNREACHABLE

NOT_PROVISIONED = "not-yet-provisioned"
NO_PROVISIONER = "not-provisioned"  # a grant kind the mesh does not provision: a warning
REQUIRES_NOTHING = "requires-nothing"
STATUSES = (OK, UNREACHABLE, AUTH_FAILED, MISSING, NOT_PROVISIONED, NO_PROVISIONER)


@attrs.frozen
class Result:
    consumer: str
    status: str
    message: str
    requirement: Optional[str] = None
    provider: Optional[str] = None
    kind: str = "none"
    credential: Optional[str] = None
    generation: Optional[int] = None
    address: Optional[str] = None  # host:port checked

    @property
    def ok(self) -> bool:
        return self.status in (OK, REQUIRES_NOTHING, NO_PROVISIONER)

    @property
    def warning(self) -> bool:
        return self.status == NO_PROVISIONER

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)
