"""Output into a pipe whose reader has gone (`mesh plan | head`): every printing verb stops
printing quietly, as `git log | head` does: no traceback, no complaint at exit, and the
command's own exit code (it finishes what it does; only the output is cut short).

The reader closes its end before the command writes a byte, so the first write fails with
EPIPE whatever the size of the output (a pipe's buffer would otherwise hide a small one).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from executors.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
HOMELAB = ROOT / "fixtures" / "homelab"


def closed_reader(*args: str) -> tuple[int, str]:
    process = subprocess.Popen([sys.executable, "-m", "executors.cli", *args], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # the reader is gone before anything is written
    stderr = process.stderr.read()
    return process.wait(timeout=120), stderr


PRINTING = [
    ("check", str(HOMELAB)),
    ("schema",),
    *[("schema", document) for document in ("module", "provisions", "mesh", "ledger",
                                           "declaration", "message-envelope", "report")],
    ("plan", str(HOMELAB)),
    ("plan", str(HOMELAB), "--json"),
    ("stale", str(HOMELAB)),
    ("graph", str(HOMELAB)),
    ("graph", str(HOMELAB), "--format", "svg"),
    ("graph", str(HOMELAB), "--format", "png"),  # bytes, through the wrapped stdout's buffer
]


@pytest.mark.parametrize("args", PRINTING, ids=[" ".join(a).replace(str(ROOT) + "/", "")
                                                for a in PRINTING])
def test_a_verb_whose_reader_closed_the_pipe_exits_quietly_with_its_own_code(args):
    expected = subprocess.run([sys.executable, "-m", "executors.cli", *args], cwd=ROOT,
                              capture_output=True, text=True, errors="replace")
    assert expected.stdout and expected.returncode in (0, 1), expected.stderr
    code, stderr = closed_reader(*args)
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    assert "Exception ignored" not in stderr, stderr
    assert code == expected.returncode


@pytest.mark.parametrize("verb", COMMANDS)
def test_every_verbs_help_into_a_closed_pipe_exits_quietly(verb):
    code, stderr = closed_reader(verb, "--help")
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert code == 0
