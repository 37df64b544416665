"""Progress of long work (an install, an upgrade), shown by the CLI, the screens and over SSH alike.

The remote half of an install prints one Progress a line as JSON; the SSH
side reads the lines back with `Progress.parse` and shows them as if the
work were local. A step that cannot go on raises StepFailed with one
sentence that names the step and says what to do.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from llmgw.errors import ExpectedError

STATES = ("doing", "done", "unchanged", "failed")


@dataclass
class Progress:
    machine: str
    step: str
    state: str  # "doing" | "done" | "unchanged" | "failed"
    sentence: str = ""

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"progress state {self.state!r} is not one of {', '.join(STATES)}")

    def line(self) -> str:
        """One JSON line, as the remote half prints it."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, line: str) -> Progress | None:
        """The Progress a line carries; None for a line that is not one (a warning the program printed)."""
        try:
            doc = json.loads(line)
        except ValueError:
            return None
        if not isinstance(doc, dict) or doc.get("state") not in STATES:
            return None
        try:
            return cls(str(doc["machine"]), str(doc["step"]), doc["state"], str(doc.get("sentence", "")))
        except KeyError:
            return None

    def shown(self) -> str:
        """The line a person reads: `gpu-1  copy the program  done  (sentence)`."""
        mark = {"doing": "…", "done": "done", "unchanged": "unchanged", "failed": "FAILED"}[self.state]
        tail = f": {self.sentence}" if self.sentence else ""
        return f"{self.machine}: {self.step}: {mark}{tail}"


class StepFailed(ExpectedError):
    """A step that cannot go on: `sentence` names the step and says what to do."""

    def __init__(self, step: str, sentence: str):
        super().__init__(sentence)
        self.step = step
        self.sentence = sentence

    def progress(self, machine: str) -> Progress:
        return Progress(machine, self.step, "failed", self.sentence)


Plan = TypeVar("Plan")


def read_plan(cls: type[Plan], text: str, sender: str) -> Plan:
    """The plan the installing machine sent on stdin, as the dataclass `cls` (keys it does not know left out);
    StepFailed naming `sender`, the command that sends it, when it is not one."""
    try:
        doc: Any = json.loads(text)
        return cls(**{key: doc[key] for key in doc if key in cls.__dataclass_fields__})  # type: ignore[attr-defined]
    except (ValueError, TypeError) as e:
        raise StepFailed("read the plan", f"the plan on stdin is not what {sender} sends ({e}); run {sender} "
                                          "with the same version of llmgw") from None
