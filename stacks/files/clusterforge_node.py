"""clusterforge_node: an AWS node's boot steps and its status record (written by cloud-init; stdlib only).

  step NAME CMD [ARG...]  one boot step: reported (state configuring, first boot only), its output streamed to stdout
                          (cloud-init's log and the console) and to the boot log; a failure is reported (state failed,
                          the step, the last line naming an ERROR or FAIL, else the last line) and the later steps of
                          the same boot do not run (exit 1)
  ready                   the last step: the node's quick checks (when it has some) as step `checks`, then state ready;
                          a host that must first reboot into its kernel command line reports ready after that reboot

The record is the SSM parameter <path>/<instance id>, a String of the Standard tier (values up to 4 KB) holding JSON
{"state", "step", "index", "total", "message", "group", "instance", "log", "time"}. Path, node group, step names,
checks and boot log come from /etc/clusterforge/node-status.json; instance id and region from cloud-init's instance
data (v1 keys). The record is put with the AWS CLI when the image has it (the request as --cli-input-json), else with
clusterforge_aws.py (SigV4 with the instance role) beside this file; a record that cannot be put is logged, never a
failed step.

Sources: https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_PutParameter.html ; cloud-init instance
data https://cloudinit.readthedocs.io/en/latest/explanation/instancedata.html . Environment (tests): CLUSTERFORGE_ROOT
(prefix of every path read and written), CLUSTERFORGE_AWS_CLI (the CLI's name, default aws).
"""

import collections
import datetime
import json
import os
import shutil
import subprocess
import sys

ROOT = os.environ.get("CLUSTERFORGE_ROOT", "")
CONFIG = "/etc/clusterforge/node-status.json"
INSTANCE_DATA = "/run/cloud-init/instance-data.json"
FAILED_NOW = "/run/clusterforge-step-failed"  # a step failed during this boot (/run is empty at every boot)
FAILED = "/var/lib/clusterforge/failed"  # a step failed during some boot
READY = "/var/lib/clusterforge/ready"
AFTER_REBOOT = "/var/lib/clusterforge/ready-after-reboot"
REBOOT = "/run/clusterforge-reboot-required"


def _path(p):
    return ROOT + p


def _touch(p, text=""):
    os.makedirs(os.path.dirname(_path(p)), exist_ok=True)
    with open(_path(p), "w", encoding="utf-8") as f:
        f.write(text)


def _log(c, line):
    """``line`` to stderr and the boot log."""
    line = f"clusterforge-node: {line}\n"
    sys.stderr.write(line)
    try:
        with open(_path(c["log"]), "a", encoding="utf-8") as f:
            f.write(line)
    except OSError:
        pass


def _put(region, request):
    """PutParameter ``request``: with the AWS CLI, else clusterforge_aws.py beside this file."""
    cli = shutil.which(os.environ.get("CLUSTERFORGE_AWS_CLI", "aws"))
    if cli:
        r = subprocess.run([cli, "ssm", "put-parameter", "--region", region, "--cli-input-json", json.dumps(request)],
                           capture_output=True, text=True, timeout=120, check=False)
        if r.returncode:
            raise RuntimeError(f"aws ssm put-parameter: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import clusterforge_aws  # only on images without the AWS CLI

    try:
        clusterforge_aws.put_parameter(region, request)
    except clusterforge_aws.Failed as e:
        raise RuntimeError(str(e)) from None


def report(c, state, step, message=""):
    """Put this node's status record (settings ``c``); a record that cannot be put is logged."""
    try:
        with open(_path(INSTANCE_DATA), encoding="utf-8") as f:
            v1 = json.load(f)["v1"]
        steps = c["steps"]
        record = {"state": state, "step": step, "index": steps.index(step) + 1 if step in steps else None,
                  "total": len(steps), "message": " ".join(message.split())[:600], "group": c["group"],
                  "instance": v1["instance_id"], "log": c["log"],
                  "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}  # noqa: UP017
        _put(v1["region"], {"Name": f"{c['path']}/{v1['instance_id']}", "Value": json.dumps(record, sort_keys=True),
                            "Type": "String", "Overwrite": True, "Tier": c["tier"]})
    except (OSError, ValueError, KeyError, ImportError, RuntimeError, subprocess.SubprocessError) as e:
        _log(c, f"status {state} {step} not reported: {e}")


def step(c, name, argv):
    """Run one boot step (see the module docstring); returns its exit status."""
    if os.path.exists(_path(FAILED_NOW)):
        _log(c, f"step {name} not run: a step failed before at this boot")
        return 1
    if not (os.path.exists(_path(READY)) or os.path.exists(_path(FAILED))):
        report(c, "configuring", name)  # the first boot; a later boot reports only a failure
    tail = collections.deque(maxlen=40)
    with open(_path(c["log"]), "a", encoding="utf-8") as log:
        log.write(f"clusterforge-node: step {name}: {' '.join(argv)}\n")
        log.flush()
        try:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        except OSError as e:
            rc = 127
            tail.append(f"ERROR: {argv[0]}: {e.strerror}")
        else:
            for line in p.stdout:
                sys.stdout.write(line)
                log.write(line)
                tail.append(line.strip())
            rc = p.wait()
    if rc:
        _touch(FAILED_NOW, name)
        _touch(FAILED, name)
        why = [x for x in tail if "ERROR" in x or "FAIL" in x] or [x for x in tail if x] or [f"exit status {rc}"]
        report(c, "failed", name, why[-1])
        _log(c, f"step {name} failed (exit status {rc})")
    return rc


def ready(c):
    """The last step: quick checks, then state ready (see the module docstring); returns the exit status."""
    if os.path.exists(_path(FAILED_NOW)):
        return 1
    if os.path.exists(_path(REBOOT)):
        _touch(AFTER_REBOOT)
        report(c, "configuring", "reboot", "rebooting into the kernel command line; ready comes after the reboot")
        return 0
    if c["checks"] and step(c, "checks", c["checks"]):
        return 1
    _touch(READY)
    report(c, "ready", "ready", "quick checks passed" if c["checks"] else "no quick checks on this node")
    return 0


def main(argv):
    try:
        with open(_path(CONFIG), encoding="utf-8") as f:
            c = json.load(f)
    except (OSError, ValueError) as e:  # run the step all the same; nothing can be reported
        c = {"log": "/var/log/clusterforge-boot.log", "steps": [], "checks": None}
        _log(c, f"{CONFIG}: {e}")
    if argv[:1] == ["step"] and len(argv) >= 3:
        return step(c, argv[1], argv[2:])
    if argv == ["ready"]:
        return ready(c)
    sys.stderr.write("usage: clusterforge-node step NAME CMD [ARG...] | ready\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
