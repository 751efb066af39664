"""What runs on the control node: reading a mesh directory, issuing secrets and certificates,
the mesh CA, the registry client."""
