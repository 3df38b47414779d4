"""Shared pytest settings for every kgym suite.

Under `make test` (KGYM_FAIL_ON_SKIP=1) a skipped test fails the run: a suite that silently
skips (no root, a missing package, no ../shared) must not look green in CI.
"""
import os
import sys

import pytest

# the suites' shared helpers (procs.py) import by name
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("KGYM_FAIL_ON_SKIP") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped:
        reporter.write_line(
            f"kgym: {skipped} test(s) skipped; every suite is required under make test",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
