"""JSON Schemas (draft 2020-12) of what travels over the broker, for `mesh schema`.

Invariants:
- One schema per document that crosses the wire: the signed envelope, the body of a
  declaration message, a node's report, an enrolment request, the body of an enrolment answer,
  the body of a logs request and a node's logs answer, of a backup request and its answer.
- They describe what executors/control and executors/node write; tests validate real messages
  against them, so a field added on one side without its schema fails a test.
"""

from __future__ import annotations

from executors.common import message_formats as messages

DRAFT = "https://json-schema.org/draft/2020-12/schema"
_NULLABLE_STRING = {"type": ["string", "null"]}
_NULLABLE_INT = {"type": ["integer", "null"]}
_OPERATION = {
    "type": "object",
    "required": ["op", "subject", "cause", "result"],
    "properties": {"op": {"type": "string"}, "subject": {"type": "string"},
                   "cause": {"type": "string"}, "result": {"type": "string"},
                   "detail": {"type": "array", "items": {"type": "string"}},
                   "seconds": {"type": "number"}},
}

ENVELOPE = {
    "$schema": DRAFT,
    "title": "mesh message envelope",
    "description": "A signed message from the control plane to a node. `signature` is the "
    "Ed25519 signature, base64, of the bytes `mesh-message/1` NUL kind NUL body, by the key "
    "certified by `signer` (PEM), which the node's pinned mesh CA must have issued "
    "(CN=<mesh> delivery, digital signatures only).",
    "type": "object",
    "additionalProperties": False,
    "required": ["format", "kind", "signer", "body", "signature"],
    "properties": {
        "format": {"const": messages.FORMAT},
        "kind": {"enum": list(messages.SIGNED_KINDS)},
        "signer": {"type": "string", "description": "PEM certificate of the delivery key"},
        "body": {"type": "string", "description": "the signed JSON text of the message"},
        "signature": {"type": "string", "contentEncoding": "base64"},
    },
}

DECLARATION_BODY = {
    "$schema": DRAFT,
    "title": "declaration message body",
    "description": "One node's declaration (`mesh schema declaration`) and, for each credential "
    "sealed to that node, each generation's sealed box for that node alone (a ledger extract: "
    "`mesh schema ledger`, only `credentials`).",
    "type": "object",
    "additionalProperties": False,
    "required": ["mesh", "node", "serial", "digest", "published", "declaration", "secrets"],
    "properties": {
        "mesh": {"type": "string"}, "node": {"type": "string"},
        "serial": {"type": "integer", "minimum": 0},
        "digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
        "published": {"type": "string", "format": "date-time"},
        "declaration": {"type": "object"},
        "secrets": {"type": "object"},
        "revoked": {"type": "array", "description": "the mesh's revocation list (public): "
                    "each entry's `serials` are certificates of the mesh CA no longer believed, "
                    "`node` and `public_key` a node that left",
                    "items": {"type": "object", "required": ["at", "reason", "serials"],
                              "additionalProperties": False,
                              "properties": {"at": {"type": "string"},
                                             "reason": {"type": "string"},
                                             "serials": {"type": "array", "items": {
                                                 "type": "string",
                                                 "pattern": "^[0-9a-f]+$"}},
                                             "node": {"type": "string"},
                                             "public_key": {"type": "string"}}}},
    },
}

_BACKUP_RECORD = {
    "type": "object",
    "required": ["instance"],
    "properties": {"instance": {"type": "string"}, "at": _NULLABLE_INT,
                   "trigger": {"enum": ["schedule", "request"]},
                   "snapshot": _NULLABLE_STRING,
                   "good": {**_NULLABLE_INT, "description": "when `snapshot` was taken"},
                   "bytes": {"type": "integer"}, "added": {"type": "integer"},
                   "error": {**_NULLABLE_STRING, "description": "the last attempt's failure, "
                             "secret values replaced by their tokens"},
                   "failures": {"type": "integer"}, "every": _NULLABLE_INT},
}

REPORT = {
    "$schema": DRAFT,
    "title": "node report",
    "description": "What a node's agent says after handling a declaration message (trigger "
    "`message`), re-applying the declaration in force (`drift`) or applying again a declaration "
    "whose state arrival failed (`retry`); and, while an arrival copies, its progress (`progress`, "
    "result `copying`, `moving`). Published by the node's own account; the broker validates its "
    "user_id.",
    "type": "object",
    "required": ["format", "mesh", "node", "at", "trigger", "result"],
    "properties": {
        "format": {"const": messages.REPORT_FORMAT},
        "mesh": {"type": "string"}, "node": {"type": "string"},
        "at": {"type": "string", "format": "date-time"},
        "trigger": {"enum": ["message", "drift", "retry", "progress", "backup"]},
        "message_id": _NULLABLE_STRING,
        "serial": _NULLABLE_INT,
        "digest": _NULLABLE_STRING,
        "result": {"enum": ["applied", "failed", "refused", "superseded", "rejected",
                            "dry-run", "copying", "backed-up"]},
        "superseded_by": _NULLABLE_INT,
        "reason": _NULLABLE_STRING,
        "serial_applied": _NULLABLE_INT,
        "operations": {"type": "array", "items": _OPERATION},
        "checks": {"type": "array", "items": _OPERATION},
        "notices": {"type": "array", "items": {"type": "object"}},
        "held": {"type": "array", "items": {"type": "object"}},
        "generations": {"type": "object", "additionalProperties": {"type": "integer"}},
        "record": {"type": ["object", "null"],
                   "description": "the node's <state root>/.mesh/applied.json after it"},
        "verify": {"type": ["object", "null"],
                   "properties": {"ok": {"type": "boolean"},
                                  "results": {"type": "array", "items": {"type": "object"}}}},
        "drift": {"type": ["array", "null"], "items": _OPERATION},
        "agent": {"type": "object"},
        "moving": {"type": "object",
                   "description": "a `progress` report's arrival under way: the instance and "
                   "its latest progress line (bytes so far, of how many, percent, rate)",
                   "properties": {"instance": {"type": "string"}, "line": {"type": "string"}}},
        "backups": {"type": "array", "items": _BACKUP_RECORD,
                    "description": "the last result of each instance this node backs up "
                    "(<state root>/.mesh/backups/<instance>.json); a `backup` report (result "
                    "`backed-up` or `failed`) is sent when a scheduled backup ends"},
        "backup": {**_BACKUP_RECORD, "type": ["object", "null"],
                   "description": "a `backup` report's backup"},
    },
}

ENROLMENT_REQUEST = {
    "$schema": DRAFT,
    "title": "enrolment request",
    "description": "A new node's request, published with its one-time token's account.",
    "type": "object",
    "additionalProperties": False,
    "required": ["format", "mesh", "node", "token", "public_key", "address"],
    "properties": {
        "format": {"const": messages.ENROLMENT_REQUEST_FORMAT},
        "mesh": {"type": "string"}, "node": {"type": "string"}, "token": {"type": "string"},
        "public_key": {"type": "string", "description": "X25519, base64 (32 bytes)"},
        "address": {"type": "string"}, "hostname": {"type": "string"},
    },
}

ENROLMENT_ANSWER = {
    "$schema": DRAFT,
    "title": "enrolment answer body",
    "description": "The control node's answer, signed like a declaration. Accepted: the CA "
    "certificate (its key must have the fingerprint the token pinned) and the node's broker "
    "account, its password sealed to the node's key.",
    "type": "object",
    "additionalProperties": False,
    "required": ["mesh", "node", "token", "result"],
    "properties": {
        "mesh": {"type": "string"}, "node": {"type": "string"}, "token": {"type": "string"},
        "result": {"enum": ["accepted", "rejected"]},
        "reason": {"type": "string"},
        "ca_certificate": {"type": "string"},
        "broker": {"type": "object", "additionalProperties": False,
                   "required": ["vhost", "user", "password_sealed", "queue", "reports"],
                   "properties": {"vhost": {"type": "string"}, "user": {"type": "string"},
                                  "password_sealed": {"type": "string"},
                                  "queue": {"type": "string"}, "reports": {"type": "string"}}},
    },
}

LOGS_REQUEST = {
    "$schema": DRAFT,
    "title": "logs request body",
    "description": "`mesh logs DIR INSTANCE`: the control node asks the agent of the "
    "instance's node for its containers' output, signed like a declaration (kind "
    "`logs-request`) and sent to the node's queue. The agent answers on the `logs` exchange "
    "with `request` as routing key, never after `expires`.",
    "type": "object",
    "additionalProperties": False,
    "required": ["mesh", "node", "instance", "request", "expires"],
    "properties": {
        "mesh": {"type": "string"}, "node": {"type": "string"},
        "instance": {"type": "string"}, "container": _NULLABLE_STRING,
        "since": {"type": ["number", "null"], "description": "Unix time"},
        "tail": _NULLABLE_INT, "timestamps": {"type": "boolean"},
        "follow": {"type": "boolean", "description": "`--follow`: answers keep coming until "
                   "`expires`; the asker renews it by sending the same request again"},
        "request": {"type": "string", "description": "random id: the answer's routing key"},
        "expires": {"type": "string", "description": "ISO 8601 UTC time"},
    },
}

LOGS_ANSWER = {
    "$schema": DRAFT,
    "title": "logs answer",
    "description": "A node's answer to a logs request, published with its own account on the "
    "`logs` exchange: the lines (every value of a credential sealed to the node replaced by "
    "its ${secret:<id>} token), or why there are none.",
    "type": "object",
    "additionalProperties": False,
    "required": ["format", "node", "request", "instance"],
    "properties": {
        "format": {"const": messages.LOGS_ANSWER_FORMAT},
        "node": {"type": "string"}, "request": {"type": "string"},
        "instance": {"type": "string"},
        "lines": {"type": "array", "items": {"type": "string"}},
        "truncated": {"type": "boolean", "description": "only the newest lines fit its bound"},
        "scrubbed": {"type": "integer", "description": "lines a secret value was taken out of"},
        "error": {"type": "string"},
        "following": {"type": "boolean", "description": "one of a follow's answers"},
        "end": {"type": "string", "description": "a follow's last answer: why it ended"},
    },
}

BACKUP_REQUEST = {
    "$schema": DRAFT,
    "title": "backup request body",
    "description": "`mesh backup DIR INSTANCE` and `mesh restore DIR INSTANCE --snapshot ID` on "
    "the control node: the agent of the instance's node runs it, signed like a declaration "
    "(kind `backup-request`) and sent to the node's queue. The agent answers on the `logs` "
    "exchange with `request` as routing key, never after `expires`.",
    "type": "object",
    "additionalProperties": False,
    "required": ["mesh", "node", "instance", "action", "request", "expires"],
    "properties": {
        "mesh": {"type": "string"}, "node": {"type": "string"},
        "instance": {"type": "string"}, "action": {"enum": ["backup", "restore"]},
        "snapshot": {**_NULLABLE_STRING, "description": "restore: the snapshot ID or prefix"},
        "request": {"type": "string", "description": "random id: the answer's routing key"},
        "expires": {"type": "string", "description": "ISO 8601 UTC time"},
    },
}

BACKUP_ANSWER = {
    "$schema": DRAFT,
    "title": "backup answer",
    "description": "A node's answer to a backup request, published with its own account on the "
    "`logs` exchange: the snapshot written (or restored) and the bytes, or why not (`refused`: "
    "the request was wrong, nothing changed). No secret value is in it.",
    "type": "object",
    "additionalProperties": False,
    "required": ["format", "node", "request", "instance", "action"],
    "properties": {
        "format": {"const": messages.BACKUP_ANSWER_FORMAT},
        "node": {"type": "string"}, "request": {"type": "string"},
        "instance": {"type": "string"}, "action": {"enum": ["backup", "restore"]},
        "snapshot": _NULLABLE_STRING, "of": _NULLABLE_STRING,
        "bytes": {"type": "integer"}, "added": {"type": "integer"},
        "seconds": {"type": "number"}, "repository": _NULLABLE_STRING,
        "target_node": _NULLABLE_STRING,
        "error": {"type": "string"}, "refused": {"type": "boolean"},
    },
}

SCHEMAS = {"message-envelope": ENVELOPE, "declaration-message": DECLARATION_BODY,
           "report": REPORT, "enrolment-request": ENROLMENT_REQUEST,
           "enrolment-answer": ENROLMENT_ANSWER, "logs-request": LOGS_REQUEST,
           "logs-answer": LOGS_ANSWER, "backup-request": BACKUP_REQUEST,
           "backup-answer": BACKUP_ANSWER}
