"""The wheel carries the migration scripts: built from the checkout, installed into a
fresh virtual environment (no system or dev site-packages, dependencies from the
configured package index), ``hubstore db upgrade`` works outside the checkout."""

from __future__ import annotations

import email.parser
import importlib.metadata
import subprocess
import sys
import tarfile
import time
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from hubstore import __version__ as hubstore_version
from hubstore import migrations

CHECKOUT = Path(__file__).resolve().parents[2]


def check_metadata(wheel: Path) -> None:
    """LICENSE and the metadata a package index shows: version, classifiers (typed, the
    Python versions, the operating systems), project URLs, the extras."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        licence = archive.read(f"{info}/licenses/LICENSE").decode()
    assert licence == (CHECKOUT / "LICENSE").read_text() and "MIT License" in licence
    assert metadata["Name"] == "hubstore"
    assert metadata["Version"] == hubstore_version
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Requires-Python"] == ">=3.11"
    classifiers = set(metadata.get_all("Classifier") or [])
    assert {"Typing :: Typed", "Programming Language :: Python :: 3.11",
            "Programming Language :: Python :: 3.12", "Programming Language :: Python :: 3.13",
            "Operating System :: POSIX :: Linux", "Operating System :: MacOS",
            "Operating System :: Microsoft :: Windows",
            "License :: OSI Approved :: MIT License"} <= classifiers
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Issues"} <= set(urls), urls
    assert {"postgres", "testing", "docs", "web", "otel"} <= set(
        metadata.get_all("Provides-Extra") or [])
    requires = {r.replace("'", '"') for r in metadata.get_all("Requires-Dist") or []}
    assert 'psycopg>=3.1; extra == "postgres"' in requires  # (either quote, by builder)
    assert metadata["Description-Content-Type"] == "text/markdown"


def test_the_postgres_extra_leaves_the_libpq_build_to_the_application() -> None:
    extras = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["postgres"] == ["psycopg>=3.1"]  # not psycopg[binary] nor psycopg[c]


def test_the_version_is_the_distributions() -> None:
    assert hubstore_version == importlib.metadata.version("hubstore")
    assert hubstore_version == tomllib.loads(
        (CHECKOUT / "pyproject.toml").read_text())["project"]["version"]


@pytest.mark.slow
def test_sdist_carries_the_license(tmp_path: Path) -> None:
    _run(sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", tmp_path,
         cwd=CHECKOUT)
    (sdist,) = tmp_path.glob("hubstore-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"LICENSE", "pyproject.toml", "README.md", "alembic.ini", "mkdocs.yml",
            "docs/index.md", "hubstore/py.typed"} <= names


def _run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_installed_wheel_migrates_without_a_checkout(tmp_path: Path) -> None:
    started = time.perf_counter()
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--quiet", "-w", dist, CHECKOUT, cwd=tmp_path)
    (wheel,) = dist.glob("hubstore-*.whl")
    built = time.perf_counter()
    names = zipfile.ZipFile(wheel).namelist()
    scripts = sorted(p.name for p in (CHECKOUT / "alembic" / "versions").glob("*.py"))
    assert "hubstore/_alembic/env.py" in names
    assert sorted(n.rsplit("/", 1)[1] for n in names
                  if n.startswith("hubstore/_alembic/versions/")) == scripts
    assert "hubstore/py.typed" in names
    # The console's templates and vendored front-end files, each licence beside its file.
    web = CHECKOUT / "hubstore" / "web"
    for folder in ("templates", "static"):
        shipped = sorted(p.relative_to(CHECKOUT).as_posix() for p in (web / folder).iterdir())
        assert shipped and set(shipped) <= set(names), set(shipped) - set(names)
    assert {"hubstore/web/static/htmx.min.js", "hubstore/web/static/htmx.LICENSE",
            "hubstore/web/static/htmx-ext-sse.min.js",
            "hubstore/web/static/htmx-ext-sse.LICENSE"} <= set(names)
    check_metadata(wheel)

    env = tmp_path / "venv"
    venv.create(env, with_pip=True, system_site_packages=False)
    python, hubstore = env / "bin" / "python", env / "bin" / "hubstore"
    _run(python, "-m", "pip", "install", "--quiet", wheel, cwd=tmp_path)
    installed = time.perf_counter()

    work = tmp_path / "elsewhere"
    work.mkdir()
    location = _run(python, "-c", "import hubstore.migrations as m; print(m.script_location())",
                    cwd=work).strip()
    assert Path(location).is_relative_to(env), location  # not the checkout's alembic/
    output = _run(hubstore, "db", "upgrade", "--url", "sqlite:///x.db", cwd=work)
    assert output.endswith(f"upgraded from base to {migrations.head()}\n")
    assert _run(hubstore, "db", "current", "--url", "sqlite:///x.db", cwd=work) == (
        f"{migrations.head()} (head)\n")
    assert (work / "x.db").is_file()
    assert _run(python, "-m", "hubstore", "db", "check", "--url", "sqlite:///x.db",
                cwd=work) == f"sqlite:///x.db: healthy (revision {migrations.head()})\n"
    assert _run(python, "-c", "import hubstore; print(hubstore.__version__)",
                cwd=work).strip() == hubstore_version
    missing = subprocess.run([hubstore, "db", "upgrade", "--url", "postgresql://u@127.0.0.1/x"],
                             cwd=work, capture_output=True, text=True, check=False)
    assert missing.returncode != 0
    assert 'pip install "hubstore[postgres]"' in missing.stderr, missing.stderr
    print(f"\nwheel built in {built - started:.1f} s, installed with its dependencies in "
          f"{installed - built:.1f} s, migrated in {time.perf_counter() - installed:.1f} s")
