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
# `mesh backup|restore DIR INSTANCE` on the control node: the node's agent runs it
BACKUP_REQUEST = "backup-request"
SIGNED_KINDS = (DECLARATION, ENROLMENT_ANSWER, LOGS_REQUEST, BACKUP_REQUEST)
REPORT_FORMAT = "mesh-report/1"
ENROLMENT_REQUEST_FORMAT = "mesh-enrolment-request/1"
LOGS_ANSWER_FORMAT = "mesh-logs/1"
BACKUP_ANSWER_FORMAT = "mesh-backup/1"  # the agent's answer, on the `logs` exchange
