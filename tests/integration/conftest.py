"""Fixtures of the integration tests: an engine on the test database (the HTTP server is in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.targets.http import Firer
from tests.integration.engine_support import SECRET, metrics_endpoint


@pytest.fixture
async def engine(store: Store) -> AsyncIterator[Engine]:
    firer = Firer(concurrency=10, env={"API_KEY": SECRET, "IDP_SECRET": "client-secret-value", "PW": SECRET})
    made = Engine(store, EngineConfig("test-engine"), firer)
    yield made
    await firer.close()
    await made.deliverer.close()


@pytest.fixture
async def metrics_url(store: Store, engine: Engine) -> AsyncIterator[str]:
    """The engine's /metrics endpoint (`engine --metrics-addr`), served in this process."""
    server, url = await metrics_endpoint(engine, store)
    yield url
    await server.close()
