"""Parts that call commands not built yet say so in one sentence (issue 11, item 12)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def unit_setting(unit: str, key: str) -> str:
    text = (ROOT / "systemd" / unit).read_text()
    return next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "="))


def run_llmgw(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmgw", *argv], capture_output=True, text=True, timeout=60)


def test_the_mirror_unit_runs_a_command_that_says_in_one_sentence_it_is_not_built_and_is_not_restarted():
    # What the unit would run, with the installed program swapped for this checkout's.
    argv = shlex.split(unit_setting("llmgw-mirror.service", "ExecStart"))
    assert argv[:3] == ["/usr/local/bin/llmgw", "mirror", "serve"]
    done = run_llmgw(argv[1:])
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "llmgw: llmgw mirror is not built yet: the model mirror (llmgw mirror serve) is planned, not shipped; "
        "nodes fetch weights themselves from a path, http(s):// or hf: source (docs/not-yet-built.md)"]
    # systemd would otherwise run it again every two seconds, for ever.
    assert "2" in unit_setting("llmgw-mirror.service", "RestartPreventExitStatus").split()


def test_llmgw_strata_serve_says_it_is_not_built_whatever_the_agent_passes_it():
    done = run_llmgw(["strata-serve", "--listen", "127.0.0.1:18090", "--model", "q", "--", "--family", "qwen"])
    assert done.returncode == 2
    assert done.stderr.startswith("llmgw: llmgw strata-serve is not built yet: ")
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_the_docs_list_what_is_not_built_yet_and_help_marks_it():
    page = (ROOT / "docs" / "not-yet-built.md").read_text()
    assert "`llmgw mirror serve`" in page and "`llmgw strata-serve`" in page
    help_text = run_llmgw(["--help"]).stdout
    assert "not built yet: the model mirror" in help_text
