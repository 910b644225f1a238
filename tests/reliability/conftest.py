"""Fixtures of the reliability suite; every test here is marked `reliability`."""

from __future__ import annotations

import pathlib

import pytest

from helpers import table_fingerprints

_HERE = pathlib.Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if _HERE in pathlib.Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)


@pytest.fixture
def fingerprint():
    return table_fingerprints
