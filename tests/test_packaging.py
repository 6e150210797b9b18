"""What ``pip install flowrl`` (a wheel, not an editable checkout) installs: every
module of the checkout, and the tuned examples that ``flowrl train`` takes its
Atari defaults from."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    """A wheel built from a copy of what the build reads (pyproject.toml, README.md,
    flowrl/, tuned_examples/), without network or build isolation."""
    pytest.importorskip("setuptools")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("flowrl", "tuned_examples"):
        shutil.copytree(ROOT / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "--no-index", "-q", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (built,) = out.glob("flowrl-*.whl")
    return built


def test_the_wheel_holds_every_module_and_the_tuned_examples(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "flowrl").rglob("*.py")}
    assert modules and not modules - names, sorted(modules - names)
    examples = {f"flowrl/tuned_examples/{p.name}" for p in (ROOT / "tuned_examples").glob("*.yaml")}
    assert "flowrl/tuned_examples/ppo-pong.yaml" in examples and not examples - names
    data = {f"flowrl/tuned_examples/{p.relative_to(ROOT / 'tuned_examples')}"
            for p in (ROOT / "tuned_examples" / "data").glob("*/*")}
    assert data and not data - names   # the datasets the examples read ship with them


def test_an_installed_wheel_finds_its_atari_defaults(wheel, tmp_path):
    """Unpacked as pip installs it, away from the checkout: ``flowrl train ppo --env
    ALE/...`` names the wheel's own ppo-pong.yaml."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, flowrl, flowrl.cli; print(flowrl.__file__); "
         "sys.exit(flowrl.cli.main(['train', 'ppo', '--env', 'ALE/Pong-v5', "
         "'--set', 'lr_rate=1']))"],
        capture_output=True, text=True, timeout=120, cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": str(site), "PYTHONWARNINGS": "ignore"})
    assert proc.stdout.strip() == str(site / "flowrl" / "__init__.py"), proc.stderr
    assert proc.returncode == 2
    notice = proc.stderr.splitlines()[0]
    assert notice == (f"ALE/Pong-v5: using the Atari defaults of "
                      f"{site / 'flowrl' / 'tuned_examples' / 'ppo-pong.yaml'} (its config "
                      "block); --set KEY=VALUE changes one, --config FILE.yaml replaces them")
