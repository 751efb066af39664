"""The imperative shell around the resolver: files, the machine, the `mesh` command."""
