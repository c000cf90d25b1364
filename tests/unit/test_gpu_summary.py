"""tests/gpu/summarize.py: the JSON summary tests/gpu/run.sh writes from pytest's JUnit XML."""
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("gpu_summarize", ROOT / "tests/gpu/summarize.py")
summarize = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(summarize)

FIGURES = '''
import pytest

def test_measures(record_property):
    record_property("gap_bytes", 2097152)
    record_property("ratio", 0.5)
    record_property("error", "")

def test_fails(record_property):
    record_property("driver", 7)
    assert 1 == 2, "over the cap"

def test_skips():
    pytest.skip("no GPU")
'''


def test_outcomes_and_figures_of_every_test_come_through(tmp_path):
    (tmp_path / "test_figures.py").write_text(FIGURES)
    report = tmp_path / "junit.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-o", "junit_family=xunit1", f"--junitxml={report}",
                           str(tmp_path / "test_figures.py")], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 1, done.stdout
    got = summarize.summarize(report, done.returncode)
    by_name = {t["name"].rsplit("::", 1)[1]: t for t in got["tests"]}
    assert by_name["test_measures"]["outcome"] == "passed"
    assert by_name["test_measures"]["figures"] == {"gap_bytes": 2097152, "ratio": 0.5,
                                                   "error": ""}
    assert by_name["test_fails"]["outcome"] == "failed"
    assert "over the cap" in by_name["test_fails"]["message"]
    assert by_name["test_fails"]["figures"] == {"driver": 7}
    assert by_name["test_skips"]["outcome"] == "skipped"
    assert got["counts"] == {"passed": 1, "failed": 1, "skipped": 1} and not got["timed_out"]


def test_a_run_cut_short_without_a_report_keeps_the_log(tmp_path):
    log = tmp_path / "pytest.log"
    log.write_text("collected 12 items\n... KeyboardInterrupt\n")
    got = summarize.summarize(tmp_path / "missing.xml", 124, log)
    assert got["timed_out"] and got["tests"] == []
    assert "missing.xml" in got["error"] and "KeyboardInterrupt" in got["log_tail"]
