"""A stand-in AWS on 127.0.0.1 for the node-side programs in ``stacks/files`` (IMDSv2, S3 GetObject, Secrets Manager
Get/PutSecretValue, SSM PutParameter and GetParameter), checking IMDS tokens and every request's SigV4 signature against
``clusterforge_aws.sign`` (itself checked against AWS's own signed-request example in test_slurm_aws.py).

``aws`` (a pytest fixture, import it into a test module) yields the server's ``state``: what the handlers read and
change (``tag``, ``objects``, ``value``, ``arn``, ``calls``, ``parameters``, ``fail_puts``) and its ``url``.
"""

from __future__ import annotations

import datetime
import hashlib
import http.server
import importlib.util
import json
import re
import socketserver
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

FILES = Path(__file__).resolve().parents[2] / "stacks" / "files"
KEY_ID, SECRET_KEY, TOKEN = "ASIASTANDIN", "stand-in-secret-key", "stand-in-session-token"
INSTANCE_ID, REGION = "i-0123456789abcdef0", "us-east-1"
NODE_NAME_TAG = "clusterforge:slurm-node"


def load(name: str) -> Any:
    """The module ``stacks/files/<name>`` (its own directory on ``sys.path``, as on a node)."""
    if str(FILES) not in sys.path:
        sys.path.insert(0, str(FILES))
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py").replace("-", "_"), FILES / name)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Aws(http.server.BaseHTTPRequestHandler):
    """IMDSv2, S3 GetObject, Secrets Manager Get/PutSecretValue and SSM Put/GetParameter."""

    state: dict[str, Any]

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _signed(self, body: bytes, service: str) -> bool:
        auth = self.headers.get("authorization", "")
        m = re.fullmatch(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([a-z0-9-]+)/([a-z0-9]+)/aws4_request, "
                         r"SignedHeaders=([a-z0-9;-]+), Signature=[0-9a-f]{64}", auth)
        if not m or m.group(1) != KEY_ID or m.group(4) != service or self.headers.get("x-amz-security-token") != TOKEN:
            return False
        signed = m.group(5).split(";")
        headers = {h: self.headers[h] for h in signed if h not in ("host", "x-amz-date", "x-amz-security-token",
                                                                     "x-amz-content-sha256")}
        when = datetime.datetime.strptime(self.headers["x-amz-date"], "%Y%m%dT%H%M%SZ")
        url = f"http://{self.headers['host']}{self.path}"
        again = self.server.sign(self.command, url, m.group(3), service, headers, body,  # type: ignore[attr-defined]
                                 (KEY_ID, SECRET_KEY, TOKEN), when)
        return bool(again["authorization"] == auth)

    def do_PUT(self) -> None:
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self._send(200, b"imds-token")
        self._send(403, b"")

    def do_GET(self) -> None:
        st = self.state
        if self.path.startswith("/latest/"):
            if self.headers.get("X-aws-ec2-metadata-token") != "imds-token":
                return self._send(401, b"")
            answers = {
                f"/latest/meta-data/tags/instance/{NODE_NAME_TAG}": st["tag"],
                "/latest/meta-data/iam/security-credentials/": "cf-node-role",
                "/latest/meta-data/iam/security-credentials/cf-node-role": json.dumps(
                    {"AccessKeyId": KEY_ID, "SecretAccessKey": SECRET_KEY, "Token": TOKEN}),
            }
            return self._send(200, answers[self.path].encode()) if self.path in answers else self._send(404, b"")
        if not self._signed(b"", "s3") or self.headers.get("x-amz-content-sha256") != hashlib.sha256(b"").hexdigest():
            return self._send(403, b"SignatureDoesNotMatch")
        obj = st["objects"].get(self.path)
        self._send(200, obj) if obj is not None else self._send(404, b"NoSuchKey")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        target = self.headers["X-Amz-Target"]
        service = "ssm" if target.startswith("AmazonSSM.") else "secretsmanager"
        if not self._signed(body, service):
            return self._send(403, json.dumps({"__type": "InvalidSignatureException"}).encode())
        req, action = json.loads(body), target.split(".", 1)[1]
        st = self.state
        st["calls"].append(action)
        if action == "PutParameter":
            if st["fail_puts"]:
                st["fail_puts"] -= 1
                return self._send(400, json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode())
            st["parameters"].setdefault(req["Name"], []).append(req)
            return self._send(200, json.dumps({"Version": len(st["parameters"][req["Name"]]), "Tier": req["Tier"]}).encode())
        if action == "GetParameter":  # the last value put
            if not st["parameters"].get(req["Name"]):
                return self._send(400, json.dumps({"__type": "ParameterNotFound", "message": ""}).encode())
            value = st["parameters"][req["Name"]][-1]["Value"]
            return self._send(200, json.dumps({"Parameter": {"Name": req["Name"], "Type": "String", "Value": value,
                                                             "Version": len(st["parameters"][req["Name"]])}}).encode())
        if req["SecretId"] != st["arn"]:
            return self._send(400, json.dumps({"__type": "ResourceNotFoundException"}).encode())
        if action == "GetSecretValue":
            if st["value"] is None:
                return self._send(400, json.dumps({"__type": "com.amazonaws.secretsmanager#ResourceNotFoundException",
                                                   "Message": "can't find the specified secret value"}).encode())
            return self._send(200, json.dumps({"ARN": st["arn"], "SecretString": st["value"]}).encode())
        if action == "PutSecretValue":
            st["value"] = req["SecretString"]
            return self._send(200, json.dumps({"ARN": st["arn"], "VersionId": "v1"}).encode())
        self._send(400, b"{}")


@pytest.fixture
def aws():
    """A stand-in AWS on 127.0.0.1 (stopped on teardown); yields its ``state``."""
    state: dict[str, Any] = {"tag": "gpu-1", "objects": {}, "value": None, "calls": [], "parameters": {},
                             "fail_puts": 0,
                             "arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:p5-slurm-munge-AbCdEf"}
    handler = type("Handler", (_Aws,), {"state": state})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.sign = load("clusterforge_aws.py").sign  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
