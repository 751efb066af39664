"""The imperative shell around the resolver, in rooms that say where code runs.

- `executors.cli`: the `mesh` command's verbs (thin: parse arguments, call, print).
- `executors.node`: what runs on every node: apply (observe → diff → apply), the firewall,
  the provisioners (`node/provisioners/`, one registry of grant kinds), verify; the extension
  points they call are typed in `node/extensions.py`.
- `executors.control`: what runs on the control node: reading a mesh directory, issuing
  secrets and certificates, the mesh CA, the registry client.
- `executors.common`: what both sides share: atomic files, reports, node keys and sealed
  values, process settings.

Arrows point one way: cli → node, control, common; node → common; control → common. Nothing
imports cli; node and control never import each other, and no module imports another in a
circle (tests/test_rooms.py holds this). Every exception raised here is a resolver.MeshError
(tests/test_exceptions.py). What each room needs beyond the library comes with an extra:
`node` or `control` (executors/cli/extras.py).
"""
