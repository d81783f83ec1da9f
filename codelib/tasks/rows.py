"""Reading a dataset's many records: one bad record costs that record, not the load (`Rows` skips and counts it, one
warning per load); the helpers the hub adapters (`codelib.tasks.hub`, `codelib.tasks.livecodebench`) and the bundled
loaders share."""

from __future__ import annotations

import collections
import math
import re
import warnings

from codelib.tasks.task import LCB_PRELUDE, Task, TaskError

# ---------------------------------------------------------------------------------------------------------------
# reading many records: one bad record costs that record, not the load


class Skip(Exception):
    """Raised by a record's builder: a well-formed record left out on purpose, for `reason`."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Rows:
    """Tasks built record by record: a record whose builder raises is skipped and counted (or, strict, re-raised as
    a TaskError naming it); `done()` warns once with the counts and an example of each reason."""

    def __init__(self, dataset: str, strict: bool = False):
        self.dataset, self.strict = dataset, strict
        self.tasks: list[Task] = []
        self.seen = 0
        self.skipped: dict[str, list[str]] = collections.defaultdict(list)

    def add(self, record_id: str, build, *args, none_means: str | None = "have no tests") -> Task | None:
        """`build(*args)`'s Task, kept. None from the builder is a skip for the reason `none_means` (None: the
        record is not this load's at all, e.g. outside a date window: neither counted nor reported); `Skip(reason)`
        raised by the builder is a skip for that reason."""
        self.seen += 1
        try:
            task = build(*args)
        except Skip as e:
            self.skip(e.reason, record_id)
            return None
        except TaskError as e:
            return self._bad(str(e), e)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as e:
            return self._bad(f"{self.dataset} record {record_id}: {type(e).__name__}: {e}"[:300], e)
        if task is not None:
            self.tasks.append(task)
        elif none_means is None:
            self.seen -= 1
        else:
            self.skip(none_means, record_id)
        return task

    def skip(self, reason: str, record_id: str) -> None:
        """A well-formed record left out on purpose (no tests, files for input): counted, never an error."""
        self.skipped[reason].append(record_id)

    def _bad(self, message: str, error: Exception) -> None:
        if self.strict:
            raise TaskError(message) from error
        self.skipped["could not be read"].append(message)
        return None

    def done(self) -> list[Task]:
        parts = [f"{len(ids)} that {reason} (e.g. {ids[0]})" for reason, ids in self.skipped.items() if ids]
        if parts:
            n = sum(len(ids) for ids in self.skipped.values())
            hint = "; strict=True raises at the first unreadable one" if self.skipped.get("could not be read") else ""
            warnings.warn(
                f"{self.dataset}: skipped {n} of {self.seen} records: {'; '.join(parts)}{hint}", stacklevel=3
            )
        return self.tasks


def _need(dataset: str, record_id, record: dict, *keys: str) -> None:
    missing = [k for k in keys if k not in record]
    if missing:
        raise TaskError(f"{dataset} record {record_id}: it lacks the field(s) {', '.join(missing)}")


def _cases(dataset: str, record_id, inputs, outputs, what: str) -> list[dict]:
    """[{"input", "output"}] from parallel lists of strings (a list of lines counts as its lines joined)."""
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise TaskError(f"{dataset} record {record_id}: {what} must be two lists of equal length")
    cases = []
    for i, o in zip(inputs, outputs, strict=True):
        i, o = ("\n".join(map(str, x)) if isinstance(x, list) else x for x in (i, o))
        if not isinstance(i, str) or not isinstance(o, str):
            raise TaskError(f"{dataset} record {record_id}: {what} holds a {type(i).__name__}, not a string")
        cases.append({"input": i, "output": o})
    return cases


# What LiveCodeBench's and TACO's harnesses put before a call-based program (lcb_runner's `import_string`): starter
# code uses `List[int]` and solutions use `deque`, `gcd`, ... without importing them. Function-task prompts start
# with it, so the program the sandbox runs has it too.
CALL_PREAMBLE = LCB_PRELUDE


def _call_prompt(statement: str, starter_code: str, call: str, preamble: str = CALL_PREAMBLE) -> str:
    """A calls-task prompt: the harness's preamble, then the statement and starter code as a docstring (raw, so the
    statement's backslashes stay as written); the completion is the whole solution, as for MBPP."""
    text = statement.replace("\x00", "").replace('"""', "'''").strip()
    starter = starter_code.replace('"""', "'''").rstrip()
    text += f"\n\nComplete this starter code (the tests call {call}):\n\n{starter}\n" if starter else "\n"
    return preamble + '\nr"""\n' + text + '"""\n'


def _seconds(text) -> float | None:
    """TACO's time_limit ("2 seconds", "1.0 second", "None", None) in seconds."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*(?:s\b|sec)", str(text or ""))
    return float(m.group(1)) if m else None


def _megabytes(text) -> int | None:
    """TACO's memory_limit ("256 megabytes", "512.0 MB", "None", None) in MB."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*(?:megabytes|mb\b|mib\b)", str(text or ""), flags=re.I)
    return int(math.ceil(float(m.group(1)))) if m else None
