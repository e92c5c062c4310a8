"""hubstore.testing, run as a user's test suite would run it (pytester, in a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from hubstore import HubStore
from hubstore.testing.factories import AgentFactory
from tests.conftest import PostgresDatabases

USER_TESTS = '''
import json, os
from pathlib import Path
from hubstore import migrations
from hubstore.testing.factories import AgentFactory, ReflexionEntryFactory

SEEN = Path(os.environ["HUBSTORE_PLUGIN_SEEN"])

def record(hub_store):
    url = hub_store.engine.url
    with SEEN.open("a") as out:
        out.write(json.dumps({"backend": url.get_backend_name(), "database": url.database,
                              "head": migrations.current(url) == migrations.head()}) + "\\n")

def test_first(hub_store):
    record(hub_store)
    AgentFactory.create(agent_id="a1")
    ReflexionEntryFactory.create(error_pattern="boom")
    assert [a.agent_id for a in hub_store.list_all_agents()] == ["a1"]
    assert hub_store.find_reflexion("boom")

def test_second_gets_a_database_of_its_own(hub_store):
    record(hub_store)
    assert hub_store.list_all_agents() == []
    hub_store.register_agent("a2", "codex")
    assert hub_store.get_agent("a2") is not None
'''


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, list[dict[str, str]]]:
    seen = pytester.path / "seen.jsonl"
    pytester.makepyfile(test_user=USER_TESTS)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HUBSTORE_PLUGIN_SEEN", str(seen))
        result = pytester.runpytest_subprocess(*args, "-q", "-p", "no:cacheprovider",
                                               timeout=300)
    lines = seen.read_text().splitlines() if seen.exists() else []
    return result, [json.loads(line) for line in lines]


def test_sqlite_by_default_with_p(pytester: pytest.Pytester,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HUBSTORE_TEST_URL", raising=False)
    result, seen = _run(pytester, "-p", "hubstore.testing")
    result.assert_outcomes(passed=2)
    assert [s["backend"] for s in seen] == ["sqlite", "sqlite"]
    assert all(s["head"] for s in seen)
    assert seen[0]["database"] != seen[1]["database"]
    assert not any(Path(s["database"]).exists() for s in seen)  # removed afterwards


def test_pytest_plugins_in_a_conftest(pytester: pytest.Pytester,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUBSTORE_TEST_URL", "")
    pytester.makeconftest('pytest_plugins = ["hubstore.testing"]\n')
    result, seen = _run(pytester)
    result.assert_outcomes(passed=2)
    assert len(seen) == 2


def test_postgresql_when_hubstore_test_url_names_a_server(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
        postgres: PostgresDatabases) -> None:
    server = postgres.create("hubstore_plugin_server")  # a throwaway database to connect to
    try:
        monkeypatch.setenv("HUBSTORE_TEST_URL", server.render_as_string(hide_password=False))
        result, seen = _run(pytester, "-p", "hubstore.testing")
        result.assert_outcomes(passed=2)
        assert [s["backend"] for s in seen] == ["postgresql", "postgresql"]
        assert all(s["head"] for s in seen)
        names = {s["database"] for s in seen}
        assert len(names) == 2 and server.database not in names
        with postgres.admin.connect() as conn:
            left = set(conn.scalars(text("SELECT datname FROM pg_database")))
        assert not names & left  # each test's database was dropped
    finally:
        postgres.drop(server)


def test_a_url_that_is_not_postgresql_is_refused(pytester: pytest.Pytester,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUBSTORE_TEST_URL", "sqlite:///somewhere.db")
    result, seen = _run(pytester, "-p", "hubstore.testing")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*HUBSTORE_TEST_URL must name a PostgreSQL server*"])
    assert seen == []


def test_factories_without_factory_boy_say_what_to_install(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['factory'] = None\n"
            "try:\n    import hubstore.testing.factories\n"
            "except ModuleNotFoundError as e:\n    print(e.name, '|', e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True, cwd=tmp_path)
    assert done.stdout.startswith("factory |")
    assert 'pip install "hubstore[testing]"' in done.stdout


#: Run first in a fresh interpreter: pytest and factory-boy as if not installed (a
#: finder ahead of the others that finds neither; nothing imported them yet).
_WITHOUT_THE_EXTRA = """
import sys
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("pytest", "_pytest", "factory"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NotInstalled())
assert not {"pytest", "_pytest", "factory"} & set(sys.modules)
"""


@pytest.mark.parametrize("module", ["hubstore.testing", "hubstore.testing.factories"])
def test_without_the_testing_extra_the_error_names_it(module: str, tmp_path: Path) -> None:
    code = (_WITHOUT_THE_EXTRA + "try:\n"
            f"    import {module}\n"
            "except ImportError as e:\n"
            "    print(type(e).__name__, e.name, '|', e)\n"
            "import hubstore\n"
            "print('hubstore still imports:', hubstore.HubStore.__name__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True, cwd=tmp_path)
    first, second = done.stdout.splitlines()
    assert first.startswith("ModuleNotFoundError pytest |"), first
    assert 'pip install "hubstore[testing]"' in first
    assert second == "hubstore still imports: HubStore"


def test_the_projects_store_fixture_binds_the_package_factories(store: HubStore) -> None:
    AgentFactory.create(agent_id="from-the-package")
    assert store.get_agent("from-the-package") is not None


def test_hub_store_fixture_here(hub_store: HubStore) -> None:
    """The plugin is loaded in this project's own suite too (tests/conftest.py)."""
    assert hub_store.engine.url.get_backend_name() in ("sqlite", "postgresql")
    AgentFactory.create(agent_id="x")
    assert [a.agent_id for a in hub_store.list_all_agents()] == ["x"]
    engine = create_engine(hub_store.engine.url)
    try:
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM agents")) == 1
    finally:
        engine.dispose()
