#!/usr/bin/env python3
"""clusterforge-slurm-aws: the AWS side of a Slurm node's first boot (written by cloud-init; stdlib only, so it
runs before any package is installed). Never prints a secret.

  hostname TAG_KEY            set the hostname to the instance tag TAG_KEY (IMDSv2: token PUT, then GET
                              meta-data/tags/instance/TAG_KEY), an RFC 1123 label, persisted in /etc/hostname
  fetch-bundle URL SHA256     download the node's file bundle (S3 object, signed with the instance role), check its
                              SHA-256 against the one pinned in user data and write every file it lists
  munge-key controller|node SECRET_ARN KEY_TOOL
                              controller: the cluster's munge key from the secret, or, when the secret has no value
                              yet, a new one from KEY_TOOL (the munge role's munge-key.py) stored with PutSecretValue;
                              node: poll GetSecretValue (bounded) until the controller stored it. Either way the key
                              is handed to KEY_TOOL on stdin, which writes /etc/munge/munge.key 0400 munge:munge.

Requests are signed with AWS Signature Version 4 with the instance role's credentials from IMDSv2, by the node's AWS
module ``clusterforge_aws.py`` (in ``$CLUSTERFORGE_LIB``, default /usr/local/lib/clusterforge). Secrets Manager's
JSON API: https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html and
API_PutSecretValue.html. Environment (tests): CLUSTERFORGE_IMDS (default http://169.254.169.254),
CLUSTERFORGE_AWS_ENDPOINT (one endpoint for every service instead of the regional ones), CLUSTERFORGE_SET_HOSTNAME
(the command that sets the hostname, default hostnamectl set-hostname), CLUSTERFORGE_ROOT (prefix of written paths),
CLUSTERFORGE_KEY_WAIT_S (node: how long to wait for the key, default 1800), CLUSTERFORGE_POLL_S (default 10).
"""

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request

# IMDSv2, SigV4 and the JSON APIs: the node's AWS module, written by cloud-init next to this helper's library
sys.path[:0] = [os.environ.get("CLUSTERFORGE_LIB", "/usr/local/lib/clusterforge"),
                os.path.dirname(os.path.abspath(__file__))]
from clusterforge_aws import ENDPOINT, ROOT, Failed, _open, _utcnow, credentials, imds, json_api, sign

LABEL = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")
ME = "clusterforge-slurm-aws"


def secrets(region, action, payload, creds):
    """One Secrets Manager call: ``(HTTP status, JSON answer)``."""
    return json_api("secretsmanager", "secretsmanager", region, action, payload, creds)


def _target(path):
    return ROOT + path


def set_hostname(tag_key):
    name = imds(f"meta-data/tags/instance/{tag_key}").strip()
    if not LABEL.fullmatch(name):
        raise Failed(f"instance tag {tag_key} is {name[:70]!r}, not a host name (lower-case letters, digits, '-')")
    cmd = os.environ.get("CLUSTERFORGE_SET_HOSTNAME", "hostnamectl set-hostname").split()
    subprocess.run([*cmd, name], check=True)
    with open(_target("/etc/hostname"), "w") as fh:
        fh.write(name + "\n")
    print(f"{ME}: hostname {name} (instance tag {tag_key})")


def fetch_bundle(url, sha256):
    u = urllib.parse.urlsplit(url)  # https://<bucket>.s3.<region>.amazonaws.com/<key>
    region = u.netloc.split(".s3.", 1)[1].split(".", 1)[0]
    real = ENDPOINT + "/" + u.netloc.split(".", 1)[0] + u.path if ENDPOINT else url
    for attempt in range(30):  # the instance role can take a moment to reach a new instance
        headers = sign("GET", real, region, "s3", {}, b"", credentials(), _utcnow())
        status, body = _open(urllib.request.Request(real, headers=headers), timeout=60)
        if status == 200:
            break
        time.sleep(min(2 + attempt, 10))
    else:
        raise Failed(f"{url}: HTTP {status}: the node's file bundle cannot be read (instance profile, bucket policy)")
    got = hashlib.sha256(body).hexdigest()
    if got != sha256:
        raise Failed(f"{url}: SHA-256 {got} is not the {sha256} pinned in the user data: nothing written")
    files = json.loads(body)["files"]
    for f in files:
        path = f["path"]
        if not path.startswith("/") or "/../" in path + "/" or "\0" in path:
            raise Failed(f"bundle path {path!r} is not absolute and plain")
        dest = _target(path)
        os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
        tmp = dest + ".clusterforge-new"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, f["content"].encode())
            os.fchmod(fd, int(f["mode"], 8))
        finally:
            os.close(fd)
        os.replace(tmp, dest)
    print(f"{ME}: {len(files)} files from {url} (SHA-256 {sha256[:12]}...)")


def munge_key(part, arn, tool):
    region = arn.split(":")[3]
    wait = int(os.environ.get("CLUSTERFORGE_KEY_WAIT_S", "1800"))
    poll = float(os.environ.get("CLUSTERFORGE_POLL_S", "10"))
    key_file = "/etc/munge/munge.key"
    deadline = time.monotonic() + wait
    while True:
        status, answer = secrets(region, "GetSecretValue", {"SecretId": arn}, credentials())
        if status == 200 and answer.get("SecretString"):
            value = answer["SecretString"]
            break
        kind = str(answer.get("__type", "")).rsplit("#", 1)[-1]
        if status != 400 or kind != "ResourceNotFoundException":  # not found = the secret has no value yet
            raise Failed(f"GetSecretValue {arn}: HTTP {status} {kind}: check the instance role's access to the secret")
        if part == "controller":
            subprocess.run(["python3", tool, "ensure", _target(key_file), "1024"], check=True, stdout=subprocess.DEVNULL)
            with open(_target(key_file), "rb") as fh:
                value = base64.b64encode(fh.read()).decode()
            status, answer = secrets(region, "PutSecretValue", {"SecretId": arn, "SecretString": value}, credentials())
            if status != 200:
                raise Failed(f"PutSecretValue {arn}: HTTP {status} {answer.get('__type', '')}: the key stays on this "
                             "node only; the other nodes wait for it")
            print(f"{ME}: a new munge key was generated here and stored in {arn}")
            break
        if time.monotonic() >= deadline:
            raise Failed(f"no munge key in {arn} after {wait} s: is the controller up (its cloud-init log)?")
        time.sleep(poll)
    subprocess.run(["python3", tool, "write", _target(key_file)], input=value.encode(), check=True,
                   stdout=subprocess.DEVNULL)
    print(f"{ME}: munge key from {arn} written to {key_file}")


def main(argv):
    try:
        if argv[:1] == ["hostname"] and len(argv) == 2:
            set_hostname(argv[1])
        elif argv[:1] == ["fetch-bundle"] and len(argv) == 3:
            fetch_bundle(argv[1], argv[2])
        elif argv[:1] == ["munge-key"] and len(argv) == 4 and argv[1] in ("controller", "node"):
            munge_key(argv[1], argv[2], argv[3])
        else:
            raise Failed("usage: hostname TAG_KEY | fetch-bundle URL SHA256 | munge-key controller|node ARN TOOL")
    except Failed as e:
        print(f"{ME}: ERROR: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
