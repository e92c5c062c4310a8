"""The wheel carries the migration scripts: built from the checkout, installed into a
fresh virtual environment (no system or dev site-packages, dependencies from the
configured package index), ``hubstore db upgrade`` works outside the checkout."""

from __future__ import annotations

import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest

from hubstore import migrations

CHECKOUT = Path(__file__).resolve().parents[1]


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
    print(f"\nwheel built in {built - started:.1f} s, installed with its dependencies in "
          f"{installed - built:.1f} s, migrated in {time.perf_counter() - installed:.1f} s")
