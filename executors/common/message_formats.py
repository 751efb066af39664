"""The names that say what a message on the mesh's broker is: its format and kind.

Invariants:
- Decided here once, standard library only: the envelope (common/messages.py, which needs
  cryptography) and the message schemas `mesh schema` prints (common/message_schemas.py, which
  runs with the library alone) read the same names.
"""

FORMAT = "mesh-message/1"
DECLARATION = "declaration"
ENROLMENT_ANSWER = "enrolment-answer"
LOGS_REQUEST = "logs-request"  # `mesh logs DIR INSTANCE`: a node's agent reads its containers
SIGNED_KINDS = (DECLARATION, ENROLMENT_ANSWER, LOGS_REQUEST)
REPORT_FORMAT = "mesh-report/1"
ENROLMENT_REQUEST_FORMAT = "mesh-enrolment-request/1"
LOGS_ANSWER_FORMAT = "mesh-logs/1"
