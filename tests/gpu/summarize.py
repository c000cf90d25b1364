"""JSON summary of a pytest JUnit XML report (xunit1): each test's outcome, duration, failure
message and the figures it recorded with record_property. Used by tests/gpu/run.sh; only the
standard library, so it runs on any machine.

usage: python summarize.py JUNIT_XML EXIT_STATUS [LOG]   (prints the JSON on stdout)
"""
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def _value(text):
    """A recorded figure back as a number when it is one."""
    for kind in (int, float):
        try:
            return kind(text)
        except (TypeError, ValueError):
            pass
    return text


def _outcome(case):
    for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        found = case.find(tag)
        if found is not None:
            return outcome, (found.get("message") or found.text or "")[:2000]
    return "passed", ""


def summarize(report: Path, status: int, log: Path = None) -> dict:
    """The summary of one run; a run without a report says so and keeps the log's tail."""
    summary = {"exit_status": status, "timed_out": status == 124, "tests": [], "counts": {}}
    if not report.is_file():
        summary["error"] = f"no JUnit report at {report}"
        if log and log.is_file():
            summary["log_tail"] = log.read_text(errors="replace")[-4000:]
        return summary
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, message = _outcome(case)
        props = {p.get("name"): _value(p.get("value")) for p in case.iter("property")}
        summary["tests"].append({"name": f"{case.get('classname')}::{case.get('name')}",
                                 "outcome": outcome, "seconds": float(case.get("time") or 0),
                                 "message": message, "figures": props})
        summary["counts"][outcome] = summary["counts"].get(outcome, 0) + 1
    return summary


def main(argv) -> int:
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    log = Path(argv[3]) if len(argv) == 4 else None
    print(json.dumps(summarize(Path(argv[1]), int(argv[2]), log), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
