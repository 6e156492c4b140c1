"""pytest fixtures over gpuq_harness: a fresh head per test, stopped after."""

import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpuq_harness import Head  # noqa: E402


@pytest.fixture
def head_factory(tmp_path):
    heads = []

    def make(config_text=None, env=None, name="head"):
        h = Head(tmp_path / name, config_text=config_text, env=env)
        heads.append(h)
        return h.start()

    yield make
    for h in heads:
        h.stop()


@pytest.fixture
def head(head_factory):
    return head_factory()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if outcome.get_result().failed:
        item.gpuq_failed = True


@pytest.fixture(autouse=True)
def passed_tests_leave_no_files(request, tmp_path):
    """A test that passed leaves no files behind: every head's data directory
    holds a 16.5 MB write-ahead log (wal_preallocate, docs/configuration.md)
    and pytest keeps the directories of its last three runs. A failed test's
    files stay, for its logs."""
    yield
    if not getattr(request.node, "gpuq_failed", False):
        shutil.rmtree(tmp_path, ignore_errors=True)
