"""What the node and the control side share: atomic files, reports, node keys and sealed
values, process settings."""
