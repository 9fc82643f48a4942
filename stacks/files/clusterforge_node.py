"""clusterforge_node: an AWS node's boot steps and its status record (written by cloud-init; stdlib only).

  step NAME CMD [ARG...]  one boot step: reported (state configuring, first boot only), its output streamed to stdout
                          (cloud-init's log and the console) and to the boot log; a failure is reported (state failed,
                          the step, the last line naming an ERROR or FAIL, else the last line) and the later steps of
                          the same boot do not run (exit 1)
  ready                   the last step: the node's quick checks (when it has some) as step `checks`, then state ready;
                          a host that must first reboot into its kernel command line reports ready after that reboot

A program of the settings' "programs" ({path: {"parameters": its SSM parameters in order, "sha256"}}: the quick
checks' health check, a node group's EFA script) is fetched before the step whose command names its path, unless the
file there already has that SHA-256: the parameters' values joined are the program gzip'd and base64-encoded. A
program that cannot be fetched or unpacked, or whose SHA-256 is not the pinned one, is not run: its step fails saying
so. The quick checks' verdict is their exit status; the failure reported is their last FAIL line (the check's name and
what is wrong).

The record is the SSM parameter <path>/<instance id>, a String of the Standard tier (values up to 4 KB) holding JSON
{"state", "step", "index", "total", "message", "group", "instance", "log", "time"}. Path, node group, step names,
checks and boot log come from /etc/clusterforge/node-status.json; instance id and region from cloud-init's instance
data (v1 keys). The record is put (and the programs' parameters read) with the AWS CLI when the image has it (the
request as --cli-input-json; get-parameter), else with clusterforge_aws.py (SigV4 with the instance role) beside this
file; a record that cannot be put is logged, never a failed step.

Sources: https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_PutParameter.html ;
https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParameter.html ; cloud-init instance
data https://cloudinit.readthedocs.io/en/latest/explanation/instancedata.html . Environment (tests): CLUSTERFORGE_ROOT
(prefix of every path read and written, and of a fetched program's path in its step's command), CLUSTERFORGE_AWS_CLI
(the CLI's name, default aws), CLUSTERFORGE_RETRY_S (first wait before fetching a program again, default 5).
"""

import base64
import collections
import datetime
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zlib

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


def _ssm(region, action, request):
    """SSM ``action`` (PutParameter or GetParameter) of ``request`` (the API's JSON request): with the AWS CLI, else
    clusterforge_aws.py beside this file. Returns GetParameter's value."""
    cli = shutil.which(os.environ.get("CLUSTERFORGE_AWS_CLI", "aws"))
    if cli:
        argv = (["put-parameter", "--region", region, "--cli-input-json", json.dumps(request)] if action == "PutParameter"
                else ["get-parameter", "--region", region, "--name", request["Name"], "--query", "Parameter.Value",
                      "--output", "text"])
        r = subprocess.run([cli, "ssm", *argv], capture_output=True, text=True, timeout=120, check=False)
        if r.returncode:
            raise RuntimeError(f"aws ssm {argv[0]}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
        return r.stdout.strip()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import clusterforge_aws  # only on images without the AWS CLI

    try:
        if action == "PutParameter":
            return clusterforge_aws.put_parameter(region, request)
        return clusterforge_aws.get_parameter(region, request["Name"])
    except clusterforge_aws.Failed as e:
        raise RuntimeError(str(e)) from None


def _v1():
    with open(_path(INSTANCE_DATA), encoding="utf-8") as f:
        return json.load(f)["v1"]


def report(c, state, step, message=""):
    """Put this node's status record (settings ``c``); a record that cannot be put is logged."""
    try:
        v1 = _v1()
        steps = c["steps"]
        record = {"state": state, "step": step, "index": steps.index(step) + 1 if step in steps else None,
                  "total": len(steps), "message": " ".join(message.split())[:600], "group": c["group"],
                  "instance": v1["instance_id"], "log": c["log"],
                  "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}  # noqa: UP017
        request = {"Name": f"{c['path']}/{v1['instance_id']}", "Value": json.dumps(record, sort_keys=True),
                   "Type": "String", "Overwrite": True, "Tier": c["tier"]}
        _ssm(v1["region"], "PutParameter", request)
    except (OSError, ValueError, KeyError, ImportError, RuntimeError, subprocess.SubprocessError) as e:
        _log(c, f"status {state} {step} not reported: {e}")


def step(c, name, argv):
    """Run one boot step (see the module docstring); returns its exit status."""
    if os.path.exists(_path(FAILED_NOW)):
        _log(c, f"step {name} not run: a step failed before at this boot")
        return 1
    if not (os.path.exists(_path(READY)) or os.path.exists(_path(FAILED))):
        report(c, "configuring", name)  # the first boot; a later boot reports only a failure
    for dest, k in c.get("programs", {}).items():
        if dest in argv:
            why = fetch(dest, k)
            if why:
                _log(c, why)
                return _failed(c, name, why, 1)
            argv = [_path(a) if a == dest else a for a in argv]
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
        why = [x for x in tail if "ERROR" in x or "FAIL" in x] or [x for x in tail if x] or [f"exit status {rc}"]
        _failed(c, name, why[-1], rc)
    return rc


def _failed(c, name, why, rc):
    """Step ``name`` failed (exit status ``rc``) because of ``why``: no later step of this boot runs."""
    _touch(FAILED_NOW, name)
    _touch(FAILED, name)
    report(c, "failed", name, why)
    _log(c, f"step {name} failed (exit status {rc})")
    return rc


def fetch(dest, k):
    """Program ``dest`` in place (``k``: its parameters and SHA-256; see the module docstring); returns why it is not,
    else ``""``."""
    try:
        with open(_path(dest), "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() == k["sha256"]:
                return ""  # fetched before
    except OSError:
        pass
    where = k["parameters"][0].rsplit("/", 1)[0]
    for attempt in range(3):  # the instance role's permissions may still be reaching this region
        try:
            region = _v1()["region"]
            text = gzip.decompress(base64.b64decode("".join(_ssm(region, "GetParameter", {"Name": n})
                                                            for n in k["parameters"])))
            break
        except (OSError, ValueError, KeyError, EOFError, zlib.error, ImportError, RuntimeError,
                subprocess.SubprocessError) as e:
            why = f"ERROR: {dest} from {where}/* could not be fetched ({e}): not run"
            if attempt < 2:
                time.sleep(float(os.environ.get("CLUSTERFORGE_RETRY_S", "5")) * 2 ** attempt)
    else:
        return why
    got = hashlib.sha256(text).hexdigest()
    if got != k["sha256"]:
        return (f"ERROR: {dest} from {where}/* has SHA-256 {got[:16]}..., not the pinned {k['sha256'][:16]}...: "
                "not run (update the stack: clusterforge up)")
    os.makedirs(os.path.dirname(_path(dest)), exist_ok=True)
    with open(_path(dest) + ".new", "wb") as f:
        f.write(text)
    os.chmod(_path(dest) + ".new", 0o755)
    os.replace(_path(dest) + ".new", _path(dest))
    return ""


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
