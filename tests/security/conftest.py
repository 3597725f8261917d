"""Fixtures of the issue-22 acceptance tests: the test CA and certificates, the users file
(tests/security/secure_util.py has the helpers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.secure_util import brokers, write_users
from tests.support.tls import Certs, make_certs

__all__ = ["brokers"]


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def users_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_users(tmp_path_factory.mktemp("users") / "users.txt")
