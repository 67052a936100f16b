"""The lab VM's Vagrantfile: the README's set-up script, Grafana's provisioning, the forwarded
ports and both providers; and `vagrant validate` where Debian's vagrant package is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VAGRANTFILE = (ROOT / "Vagrantfile").read_text()
CODE = "\n".join(line.split("#")[0] for line in VAGRANTFILE.splitlines())  # without comments


def test_provisions_with_the_readmes_setup_then_grafana() -> None:
    setup = CODE.index("./scripts/setup.sh")
    grafana = CODE.index('path: "scripts/vagrant-provision.sh"')
    assert setup < grafana, "setup.sh must run first: Grafana's step needs its packages"
    assert (ROOT / "scripts" / "setup.sh").exists()
    assert os.access(ROOT / "scripts" / "vagrant-provision.sh", os.X_OK)


def test_box_providers_and_resources() -> None:
    assert 'BOX = ENV.fetch("ZCUBE_VM_BOX", "debian/bookworm64")' in CODE
    assert "config.vm.box = BOX" in CODE
    for provider in ("virtualbox", "libvirt"):
        assert f'config.vm.provider "{provider}"' in CODE
    assert re.search(r"MEMORY_MB = 8192\b", CODE)
    assert re.search(r"CPUS = 4\b", CODE)
    assert 'config.vm.synced_folder ".", "/vagrant"' in CODE


def test_forwards_grafana_prometheus_and_locust() -> None:
    forwarded = {int(g) for g in re.findall(r"^\s*(\d+) =>", CODE, re.MULTILINE)}
    assert forwarded == {3000, 9090, 8089}
    assert '"forwarded_port", guest: guest' in CODE


def test_provision_script_uses_our_grafana_files() -> None:
    script = (ROOT / "scripts" / "vagrant-provision.sh").read_text()
    for path in (
        "grafana/provisioning/datasources/prometheus.yaml",
        "grafana/provisioning/dashboards/zcube.yaml",
        "grafana/dashboards/serving.json",
    ):
        assert path in script
        assert (ROOT / path).exists()
    assert "https://apt.grafana.com" in script
    assert "modprobe openvswitch" in script


def test_vagrant_validate(tmp_path: Path) -> None:
    vagrant = shutil.which("vagrant")
    if vagrant is None:
        pytest.skip(
            "vagrant is not installed, so `vagrant validate` cannot run: "
            "apt-get install vagrant (Debian 12 ships 2.3.4)"
        )
    env = {
        **os.environ,
        "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot"),  # leave no .vagrant/ in the repository
        "VAGRANT_CHECKPOINT_DISABLE": "1",
    }
    # --ignore-provider: CI has neither VirtualBox nor libvirt; their blocks are still parsed.
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
