"""`cachealloc predict --json`: one versioned document, on success and on
failure (docs/prediction.md, "--json"), and the exit codes it carries.

Bump SCHEMA_VERSION when a documented key changes meaning or goes away;
adding a key is not a change. Keys not documented are detail that may
change without notice.
"""
from __future__ import annotations

from typing import Optional

SCHEMA_VERSION = 1

# Exit codes, one per outcome (also in `cachealloc predict --help`).
EXIT_FITS = 0              # fits, band included
EXIT_DOES_NOT_FIT = 1      # does not fit, band included
EXIT_BAD_INPUT = 2         # bad arguments, a script or builder not found, a size that does not reach the step
EXIT_TOO_CLOSE = 3         # the margin to the limit is within the band
EXIT_NOT_PREDICTED = 4     # refused by the fake device, caught in a loop, timed out, failed, no step or no allocation seen
VERDICT_EXIT = {"fits": EXIT_FITS, "does_not_fit": EXIT_DOES_NOT_FIT,
                "too_close_to_call": EXIT_TOO_CLOSE}
# Failure kinds -> exit code; anything else the step could not be predicted.
BAD_INPUT_KINDS = ("bad_input", "size_not_reaching")

EXIT_HELP = """exit status:
  0  fits (the margin to the limit exceeds the error band)
  1  does not fit (the need exceeds the limit by more than the band)
  2  bad input (arguments, a missing script or builder, a size that does not reach the step)
  3  too close to call (the margin is within the band)
  4  the step could not be predicted: refused by the fake device, caught in a loop, timed out,
     failed on the fake device, or no optimizer step / no CUDA allocation seen"""


def exit_code(verdict: str, failure_kind: Optional[str] = None) -> int:
    if verdict == "error":
        return EXIT_BAD_INPUT if failure_kind in BAD_INPUT_KINDS else EXIT_NOT_PREDICTED
    return VERDICT_EXIT[verdict]


def document(answer: dict, command: str) -> dict:
    """The answer as the --json document: the answer's own keys plus
    schema_version, command, exit_code and error (None)."""
    doc = {"schema_version": SCHEMA_VERSION, "command": command,
           "verdict": answer["verdict"], "exit_code": exit_code(answer["verdict"]), "error": None}
    doc.update({k: v for k, v in answer.items() if k not in doc})
    return doc


def failure_document(command: str, error: dict, *, gpu: Optional[str] = None,
                     assumed_torch: Optional[str] = None, mode: Optional[str] = None) -> dict:
    """The --json document of a prediction that did not come: error holds
    kind, message, where, output_tail and exceptions."""
    return {"schema_version": SCHEMA_VERSION, "command": command, "verdict": "error",
            "exit_code": exit_code("error", error.get("kind")), "error": error, "gpu": gpu,
            "torch_versions": {"assumed": assumed_torch, "installed": installed_torch(),
                               "installed_checked": None},
            "mode": mode}


def installed_torch() -> Optional[str]:
    try:
        from importlib.metadata import version
        return version("torch")
    except Exception:       # not installed, or metadata unreadable: say so, do not fail the error path
        return None
