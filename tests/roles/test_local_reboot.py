"""A GPU workstation that configures itself (``connection: local``) gets the reboot requested, not performed.

Ansible's ``reboot`` module refuses the local connection ("would reboot the control node"), so a driver install on
such a host used to end in a failed play. Here the workstation example with a GPU is rendered as a user would
(``clusterforge render``), and a play in the rendered directory notifies the ``nvidia_driver`` role's handlers as a
driver install that changed packages does, over the rendered inventory's real local connection. It runs in check
mode: nothing on this machine is written, and the reboot action still runs its local-connection check first.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ruamel.yaml import YAML

from clusterforge.ansible.runner import ansible_path
from clusterforge.cli import main
from tests.ansible_vars import load_vars
from tests.conftest import EXAMPLES

PLAY = """\
- name: Notify the driver's reboot handlers as an install that changed packages does.
  hosts: with_nvidia_driver
  gather_facts: true
  roles:
    - role: nvidia_driver
      tags: [never]  # the role's variables and handlers, none of its tasks
  tasks:
    - name: Record the driver state an install on a running host leaves behind.
      ansible.builtin.set_fact:
        __nvidia_driver_image_mode: false
        __nvidia_driver_secure_boot_state: false
        __nvidia_driver_gpus: ["0000:17:00.0"]
        __nvidia_driver_initramfs_tool_present: false
    - name: Stand in for a driver install that changed packages.
      ansible.builtin.debug:
        msg: driver packages changed
      changed_when: true
      notify:
        - Request a reboot for the new NVIDIA driver.
        - Reboot to load the new NVIDIA driver.
"""


def _gpu_workstation(tmp: Path) -> Path:
    yaml = YAML()
    doc = yaml.load((EXAMPLES / "local-workstation.yaml").read_text())
    doc["node_groups"][0]["hardware"] = {"gpu": "l40s:1"}
    doc["software"] = {"kernel_updates": "hold"}
    doc["validation"]["suites"] = ["node"]
    path = tmp / "workstation-gpu.yaml"
    with path.open("w") as fh:
        yaml.dump(doc, fh)
    return path


def test_local_workstation_requests_the_reboot_instead_of_failing(tmp_path: Path) -> None:
    bp = _gpu_workstation(tmp_path)
    assert main(["render", str(bp), "-o", str(tmp_path / "out")]) == 0
    d = tmp_path / "out" / "ansible"
    inventory = load_vars(d / "inventory.yml")
    hosts = inventory["all"]["children"]["local"]["hosts"]
    assert hosts["localhost"]["ansible_connection"] == "local"
    assert "local" in inventory["all"]["children"]["with_nvidia_driver"]["children"]  # the driver role runs there
    (d / "reboot-path.yml").write_text(PLAY)
    env = {**os.environ, "PATH": ansible_path(), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}
    r = subprocess.run(["ansible-playbook", "reboot-path.yml", "--check"], cwd=d, env=env, capture_output=True,
                       text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    report = json.loads(r.stdout[r.stdout.index("{"):])
    results = {t["task"]["name"].removeprefix("nvidia_driver : "): t["hosts"]["localhost"]
               for p in report["plays"] for t in p["tasks"]}
    reboot = results["Reboot to load the new NVIDIA driver."]
    assert reboot.get("skipped") and not reboot.get("failed"), reboot
    # the reboot is requested (Ubuntu's /run/reboot-required convention) and the run says why it is not performed
    assert results["Mark the reboot as required."].get("changed")
    said = results["Say that the reboot is requested, not performed."]["msg"]
    assert "local connection" in said and "580." in said
