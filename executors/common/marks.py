"""The marks a node's executors leave on the machine, by which they find their own work again.

Invariants:
- Decided here once: the Docker labels every managed container carries (which mesh, which
  instance, its config digest and summary, run-once), the Engine API version spoken, the
  nftables table the firewall owns and the prefix of the empty chain whose name carries the
  applied digest, and the format version of the applied record.
- Standard library only, nothing imported (in common/: the node writes the applied record, the
  control plane reads it): the no-op check of `mesh apply` (apply_fast), the
  Engine layer (docker_engine), the firewall and the applied record all read the same names,
  and the no-op check must stay cheaper than importing attrs.
"""

LABEL_MESH = "mesh.mesh"
LABEL_INSTANCE = "mesh.instance"
LABEL_CONTAINER = "mesh.container"
LABEL_DIGEST = "mesh.config-digest"
LABEL_SUMMARY = "mesh.config"  # the config summary (env values as fingerprints): says what changed
LABEL_RUN_ONCE = "mesh.run-once"

ENGINE_SOCKET = "unix:///var/run/docker.sock"
ENGINE_API_VERSION = "1.41"  # fixed, so connecting costs no /version round trip (Debian 12: 20.10)

FIREWALL_FAMILY = "inet"
FIREWALL_TABLE = "mesh"
# The digest names an empty regular chain (never jumped to, so it matches nothing): listing
# chains is the cheapest question libnftables answers, it needs no set elements.
DIGEST_CHAIN_PREFIX = "digest_"

APPLIED_RECORD_VERSION = 2  # applied.json: 2 since the record is written after provisioning


def digest_chain_name(digest: str) -> str:
    """The name of the empty chain that says which digest the table carries."""
    return DIGEST_CHAIN_PREFIX + digest.replace(":", "_", 1)


def digest_from_chain_name(name: str) -> str | None:
    """The digest a chain's name carries, or None for any other chain."""
    if not name.startswith(DIGEST_CHAIN_PREFIX):
        return None
    return name[len(DIGEST_CHAIN_PREFIX):].replace("_", ":", 1)
