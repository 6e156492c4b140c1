"""pytest fixtures over gpuq_harness: a fresh head per test, stopped after."""

import os
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
