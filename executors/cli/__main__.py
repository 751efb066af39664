"""`python -m executors.cli …` is the `mesh` command."""

import sys

from executors.cli.main import main

sys.exit(main())
