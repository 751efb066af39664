"""The order a parallel run hands out test files (scripts/test.sh: pytest-xdist, `--dist
loadfile --no-loadscope-reorder`): the longest first, so no worker starts a long file while the
others run out of work (longest-processing-time-first scheduling).

The figures are seconds measured for each file on the 2-core test machine (`--durations=0`,
one worker); a file not listed counts as short and keeps its collection order after these. They
only decide the order: nothing is skipped or timed by them. Refresh them when a file's time
changes much (`python3 -m pytest --durations=0 -p no:xdist` and add up the rows per file).
"""

from __future__ import annotations

SECONDS_BY_FILE = {
    "tests/test_backup_docker.py": 97,
    "tests/test_backup_target_docker.py": 70,
    "tests/test_upgrade_docker.py": 50,
    "tests/test_tools_netns.py": 162,
    "tests/test_web_names_netns.py": 35,
    "tests/test_init_netns.py": 155,
    "property_tests/test_loader_props.py": 103,
    "tests/test_fleet_broker_restart.py": 92,
    "tests/test_apply_crash.py": 83,
    "tests/test_fleet_netns.py": 82,
    "tests/test_no_clear_secrets_netns.py": 100,
    "tests/test_control_build_netns.py": 81,
    "tests/test_fleet_tls.py": 77,
    "tests/test_fleet_faults.py": 75,
    "tests/test_admin_rotation.py": 70,
    "tests/test_same_node_docker.py": 64,
    "tests/test_metrics_netns.py": 65,
    "tests/test_assistant_build_docker.py": 50,
    "tests/test_registry_tls_netns.py": 58,
    "tests/test_self_hosting_publish_netns.py": 70,
    "property_tests/test_validation_props.py": 57,
    "tests/test_join_netns.py": 40,
    "tests/test_postgres_tls_netns.py": 45,
    "tests/test_state_move_netns.py": 50,
    "tests/test_state_move_agents_netns.py": 105,
    "tests/test_logs_fleet.py": 30,
    "tests/test_backup_schedule_fleet.py": 35,
    "tests/test_node_remove_fleet.py": 50,
    "tests/test_control_image.py": 35,
    "tests/test_plaintext_scan.py": 32,
    "tests/test_binding_mounts_docker.py": 32,
    "tests/test_secret_files_docker.py": 31,
    "tests/test_apply_fast.py": 31,
    "tests/test_fleet_permissions.py": 29,
    "tests/test_fleet_rotation.py": 24,
    "tests/test_firewall_netns.py": 21,
    "tests/test_apply_docker.py": 20,
    "property_tests/test_mesh_props.py": 20,
    "property_tests/test_metamorphic_props.py": 18,
    "tests/test_firewall_exposure_netns.py": 17,
    "property_tests/test_apply_diff_props.py": 17,
    "property_tests/test_firewall_props.py": 16,
    "property_tests/test_apply_after_docker_props.py": 16,
    "property_tests/test_resolve_props.py": 16,
    "tests/test_unprovisioned_grants.py": 14,
    "property_tests/test_schema_props.py": 13,
    "tests/test_fuzz_harness.py": 12,
    "tests/test_provision_postgres.py": 11,
    "tests/test_graph_golden.py": 10,
    "property_tests/test_strategies_reach.py": 10,
    "tests/test_held_apply.py": 10,
}


def pytest_collection_modifyitems(session, config, items):
    """Longest files first; within a file, and among files not listed, the collected order."""
    def seconds(item) -> int:
        return SECONDS_BY_FILE.get(item.nodeid.split("::", 1)[0], 0)

    items.sort(key=lambda item: -seconds(item))  # sort is stable: files stay contiguous
