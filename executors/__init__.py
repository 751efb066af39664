"""The imperative shell around the resolver, in rooms that say where code runs.

- `executors.cli`: the `mesh` command's verbs (thin: parse arguments, call, print).
- `executors.node`: what runs on every node: apply (observe → diff → apply), the firewall,
  the provisioners, verify.
- `executors.control`: what runs on the control node: reading a mesh directory, issuing
  secrets and certificates, the mesh CA, the registry client.
- `executors.common`: what both sides share: atomic files, reports, node keys and sealed
  values, process settings.

Arrows point one way: cli → node, control, common; node → common; control → common. Nothing
imports cli; node and control never import each other (tests/test_rooms.py holds this).
"""
