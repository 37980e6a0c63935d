"""Packaging: every installed import name lives under ``ustack.``, and the wheel works on its own.

The fast check reads pyproject.toml against the source tree: each folder
with an ``__init__.py`` under ustack/, backends/ and tools/ is a listed
package, mapped to its ``ustack.`` name. The slow one builds a wheel from a
copy of the sources (``pip wheel --no-build-isolation``: no network, the
Cython extension compiled afresh, ~20 s), installs it with ``pip install
--target`` and runs the console script, ``python -m ustack`` and every
module from there, with the repository nowhere on the path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("ustack", "backends", "tools")
BUILD_FILES = ("pyproject.toml", "setup.py", "README.md")
TIMEOUT = 300


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def installed_name(folder: Path) -> str:
    """The import name a source folder installs as: ``backends/afxdp`` -> ``ustack.backends.afxdp``."""
    parts = folder.relative_to(REPO).parts
    return ".".join(parts if parts[0] == "ustack" else ("ustack",) + parts)


def source_packages() -> set[str]:
    return {installed_name(init.parent) for top in SOURCES for init in (REPO / top).rglob("__init__.py")
            if "__pycache__" not in init.parts}


def source_modules() -> set[str]:
    """Every module file of the sources, as its path inside an installed ``ustack`` package."""
    found = set()
    for top in SOURCES:
        for path in (REPO / top).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            name = installed_name(path.parent).replace(".", "/")
            found.add(f"{name}/{path.name}")
    return found


def test_pyproject_lists_every_package_under_its_ustack_name():
    config = pyproject()["tool"]["setuptools"]
    assert set(config["packages"]) == source_packages()
    assert all(name == "ustack" or name.startswith("ustack.") for name in config["packages"])
    for name, folder in config["package-dir"].items():
        assert name.startswith("ustack.") and installed_name(REPO / folder) == name
    assert pyproject()["project"]["scripts"] == {"ustack": "ustack.tools.cli:main"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a clean copy of the sources (no build/, no in-place extension, no caches)."""
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_FILES:
        shutil.copy2(REPO / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "_fastpath.c", "run")
    for top in SOURCES:
        shutil.copytree(REPO / top, src / top, ignore=skip)
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                           "--disable-pip-version-check", "-q", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [built] = out.glob("ustack-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                           "--disable-pip-version-check", "-q", "--target", str(target), str(wheel)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return target


def run_installed(installed: Path, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run with the installed copy first on the path and the repository off it (cwd elsewhere)."""
    env = dict(os.environ, PYTHONPATH=str(installed), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd, env=env)


def test_wheel_holds_only_ustack_and_every_module(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"ustack", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    with zipfile.ZipFile(wheel) as z:
        info = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert z.read(info).decode().split() == ["ustack"]
        entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "ustack = ustack.tools.cli:main" in z.read(entry).decode()
    assert source_modules() <= set(names)
    assert any(n.startswith("ustack/_fastpath.") and n.endswith(".so") for n in names)
    # the dev script and Cython's generated C stay behind; the bench's lwIP server and the program matrix's
    # echo client ship as sources (built on use)
    shipped_c = {"ustack/tools/lwip_server.c", "ustack/tools/echo_client.c"}
    assert shipped_c <= set(names)
    assert not any(n.endswith(("/run", ".c")) for n in names if n not in shipped_c)


def test_console_script_and_python_m_work_from_the_installed_wheel(installed, tmp_path):
    script = installed / "bin" / "ustack"
    for argv in ([str(script), "--help"], [sys.executable, "-m", "ustack", "--help"]):
        proc = run_installed(installed, argv, tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("usage: ustack ") and "trace" in proc.stdout and "bench" in proc.stdout
    for tool in ("trace", "stats", "bench"):
        proc = run_installed(installed, [sys.executable, "-m", f"ustack.tools.{tool}", "--help"], tmp_path)
        assert proc.returncode == 0 and proc.stdout.startswith(f"usage: ustack {tool}"), proc.stderr


def test_every_installed_module_imports_from_the_wheel(installed, tmp_path):
    code = (
        "import importlib, pkgutil, sys, ustack\n"
        "names = ['ustack'] + [m.name for m in pkgutil.walk_packages(ustack.__path__, 'ustack.')\n"
        "                      if not m.name.endswith('__main__')]\n"
        "for name in names:\n"
        "    module = importlib.import_module(name)\n"
        "    if not module.__file__.startswith(sys.argv[1]):\n"
        "        sys.exit(f'{name} imported from {module.__file__}')\n"
        "print(' '.join(names))\n"
    )
    proc = run_installed(installed, [sys.executable, "-c", code, str(installed)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = {path[:-3].replace("/", ".").removesuffix(".__init__") for path in source_modules()}
    assert set(proc.stdout.split()) == expected - {"ustack.__main__"} | {"ustack._fastpath"}
