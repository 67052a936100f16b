"""The opt-in lab-VM scripts (scripts/vm/): they parse, pass shellcheck where it is installed,
read setup.sh's package list the way build-box.sh does, and the Vagrantfile's TCG switch
validates. The VM itself is booted only by scripts/vm/test-vm.sh, by hand (docs/SCALE.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [
    ROOT / "scripts" / "vm" / name for name in ("build-box.sh", "test-vm.sh", "stamp-lines.sh")
]
VAGRANTFILE = (ROOT / "Vagrantfile").read_text()
CODE = "\n".join(line.split("#")[0] for line in VAGRANTFILE.splitlines())  # without comments


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_parse_and_are_executable(script: Path) -> None:
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck(script: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (setup.sh installs it)")
    done = subprocess.run(
        [shellcheck, "-S", "warning", str(script)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout


def test_build_box_reads_setups_package_list() -> None:
    """build-box.sh puts setup.sh's APT_PACKAGES in the image with this sed pipeline."""
    setup = ROOT / "scripts" / "setup.sh"
    done = subprocess.run(
        ["bash", "-c", f"sed -n '/^APT_PACKAGES=(/,/^)/p' {setup} | sed '1d;$d'"],
        capture_output=True,
        text=True,
        check=True,
    )
    packages = done.stdout.split()
    block = re.search(r"^APT_PACKAGES=\((.*?)^\)", setup.read_text(), re.MULTILINE | re.DOTALL)
    assert block is not None
    assert packages == block.group(1).split()
    assert "openvswitch-switch" in packages and "mininet" in packages


def test_vagrantfile_has_the_tcg_switch_and_keeps_laptop_defaults() -> None:
    assert 'ENV.fetch("ZCUBE_VM_DOMAIN_TYPE")' in CODE
    assert "lv.driver = DOMAIN_TYPE" in CODE
    assert 'ENV.fetch("ZCUBE_VM_CPUS", CPUS.to_s)' in CODE
    assert 'ENV.fetch("ZCUBE_VM_MEMORY_MB", MEMORY_MB.to_s)' in CODE
    assert '"ZCUBE_SKIP_GRAFANA"' in CODE


@pytest.mark.parametrize("domain_type", ["qemu", "kvm"])
def test_vagrant_validate_with_domain_type(tmp_path: Path, domain_type: str) -> None:
    vagrant = shutil.which("vagrant")
    if vagrant is None:
        pytest.skip("vagrant is not installed: apt-get install vagrant")
    env = {
        **os.environ,
        "ZCUBE_VM_DOMAIN_TYPE": domain_type,
        "ZCUBE_VM_BOX": "zcube/bookworm-local",
        "ZCUBE_VM_CPUS": "2",
        "ZCUBE_VM_MEMORY_MB": "4096",
        "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot"),
        "VAGRANT_CHECKPOINT_DISABLE": "1",
    }
    done = subprocess.run(
        [vagrant, "validate", "--ignore-provider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "validated successfully" in done.stdout


def test_rsync_excludes_leave_no_package_out() -> None:
    """An unanchored rsync exclude ("results/") matches at every depth: it left the package
    zcube_lab/emulator/results/ out of the VM's /vagrant on the first real boot."""
    block = re.search(r"rsync__exclude: \[(.*?)\]", CODE)
    assert block is not None
    excludes = re.findall(r'"([^"]+)"', block.group(1))
    assert "/results/" in excludes
    for exclude in excludes:
        if exclude.startswith("/"):
            continue
        name = exclude.rstrip("/")
        packages = [
            p.parent
            for p in ROOT.rglob(f"{name}/__init__.py")
            if ".venv" not in p.parts and ".git" not in p.parts
        ]
        assert not packages, f"rsync exclude {exclude!r} would leave out {packages}"
