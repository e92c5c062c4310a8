"""The console's HTTP tests' clients: one for the app with the operator token, one
signed in."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from hubstore import HubStore
from hubstore.web import create_app
from tests.console.web_helpers import TOKEN, sign_in


@pytest.fixture
def client(store: HubStore) -> Iterator[TestClient]:
    with TestClient(create_app(store, token=TOKEN), base_url="http://127.0.0.1") as c:
        yield c


@pytest.fixture
def operator(client: TestClient) -> TestClient:
    sign_in(client)
    return client
