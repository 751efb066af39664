"""The names that say what a message on the mesh's broker is: its format and kind.

Invariants:
- Decided here once, standard library only: the envelope (common/messages.py, which needs
  cryptography) and the message schemas `mesh schema` prints (common/message_schemas.py, which
  runs with the library alone) read the same names.
"""

FORMAT = "mesh-message/1"
DECLARATION = "declaration"
ENROLMENT_ANSWER = "enrolment-answer"
SIGNED_KINDS = (DECLARATION, ENROLMENT_ANSWER)
REPORT_FORMAT = "mesh-report/1"
ENROLMENT_REQUEST_FORMAT = "mesh-enrolment-request/1"
