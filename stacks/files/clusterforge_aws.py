"""clusterforge_aws: AWS requests from a node with its instance role (written by cloud-init; stdlib only).

IMDSv2 (:func:`imds`, :func:`credentials`), SigV4 (:func:`sign`), the JSON 1.1 APIs (:func:`json_api`) and SSM
PutParameter and GetParameter (:func:`put_parameter`, :func:`get_parameter`). Imported by the Slurm helper (``clusterforge-slurm-aws``) and by the boot step
runner (``clusterforge_node.py``) on images without the AWS CLI; it has no command line of its own.

Sources: SigV4 https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv4-signing.html ; role credentials
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-security-credentials.html ; PutParameter
https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_PutParameter.html (JSON 1.1, target AmazonSSM);
GetParameter https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParameter.html .
Environment (tests): CLUSTERFORGE_IMDS, CLUSTERFORGE_AWS_ENDPOINT (one endpoint for every service), CLUSTERFORGE_ROOT
(prefix of the paths the Slurm helper writes), CLUSTERFORGE_RETRY_S (first retry wait, default 2).
"""

import datetime
import hashlib
import hmac
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request

IMDS = os.environ.get("CLUSTERFORGE_IMDS", "http://169.254.169.254").rstrip("/")
ENDPOINT = os.environ.get("CLUSTERFORGE_AWS_ENDPOINT", "").rstrip("/")
ROOT = os.environ.get("CLUSTERFORGE_ROOT", "")


class Failed(Exception):
    """One line for the log: what failed and what to do."""


def _open(req, timeout=10):
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError) as e:
        raise Failed(f"{req.full_url.split('?')[0]}: {getattr(e, 'reason', e)}") from None


def imds(path):
    """GET ``latest/<path>`` from the instance metadata service with an IMDSv2 session token."""
    status, token = _open(urllib.request.Request(f"{IMDS}/latest/api/token", method="PUT",
                                                 headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"}))
    if status != 200:
        raise Failed(f"IMDSv2 token: HTTP {status}")
    status, body = _open(urllib.request.Request(f"{IMDS}/latest/{path}",
                                                headers={"X-aws-ec2-metadata-token": token.decode()}))
    if status != 200:
        raise Failed(f"instance metadata {path}: HTTP {status} (is access to instance tags enabled in the launch "
                     "template, and the instance profile attached?)")
    return body.decode()


def credentials():
    """The instance role's temporary credentials ``(access key, secret key, token)``."""
    role = imds("meta-data/iam/security-credentials/").split()[0]
    c = json.loads(imds(f"meta-data/iam/security-credentials/{role}"))
    return c["AccessKeyId"], c["SecretAccessKey"], c.get("Token")


def sign(method, url, region, service, headers, body, creds, now):
    """SigV4 ``Authorization`` and ``X-Amz-*`` headers added to ``headers`` (returned as a new dict) for a request of
    ``body`` bytes; ``now`` a UTC datetime."""
    key, secret, token = creds
    u = urllib.parse.urlsplit(url)
    amz = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz[:8]
    h = {k.lower(): " ".join(str(v).split()) for k, v in headers.items()}
    h["host"] = u.netloc
    h["x-amz-date"] = amz
    if token:
        h["x-amz-security-token"] = token
    payload = hashlib.sha256(body).hexdigest()
    if service == "s3":
        h["x-amz-content-sha256"] = payload
    names = sorted(h)
    query = "&".join(sorted(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                            for k, v in urllib.parse.parse_qsl(u.query, keep_blank_values=True)))
    path = u.path or "/"
    if service != "s3":  # every service but S3 normalizes and double-encodes the path
        path = urllib.parse.quote(path, safe="/-_.~")
    canonical = "\n".join([method, path, query, "".join(f"{n}:{h[n]}\n" for n in names), ";".join(names), payload])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (day, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    out = {k2: v for k2, v in h.items() if k2 != "host"}
    out["authorization"] = (f"AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders={';'.join(names)}, "
                            f"Signature={sig}")
    return out


def _utcnow():
    return datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 (runs on the nodes' Python 3.9+)


def json_api(service, target, region, action, payload, creds):
    """One call of an AWS JSON 1.1 API (``service`` its endpoint prefix, ``target`` its X-Amz-Target prefix):
    ``(HTTP status, JSON answer)``."""
    url = ENDPOINT + "/" if ENDPOINT else f"https://{service}.{region}.amazonaws.com/"
    body = json.dumps(payload).encode()
    headers = sign("POST", url, region, service,
                   {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": f"{target}.{action}"},
                   body, creds, _utcnow())
    status, answer = _open(urllib.request.Request(url, data=body, method="POST", headers=headers), timeout=30)
    try:
        return status, json.loads(answer or b"{}")
    except ValueError:
        return status, {}


def ssm(region, action, request):
    """One SSM call (``action``, the API's JSON ``request``) with the instance role, retried on throttling and server
    errors (bounded: about a minute); returns the answer. Raises :class:`Failed` with the error's type and message."""
    for attempt in range(6):
        code, answer = json_api("ssm", "AmazonSSM", region, action, request, credentials())
        kind = str(answer.get("__type", "")).rsplit("#", 1)[-1]
        if code == 200:
            return answer
        if code < 500 and "Throttl" not in kind and kind != "TooManyUpdates":
            break
        time.sleep(float(os.environ.get("CLUSTERFORGE_RETRY_S", "2")) * 2 ** attempt)
    raise Failed(f"{action} {request.get('Name')}: HTTP {code} {kind} {str(answer.get('message', ''))[:200]}")


def put_parameter(region, request):
    """SSM PutParameter of ``request`` (:func:`ssm`)."""
    ssm(region, "PutParameter", request)


def get_parameter(region, name):
    """The value of SSM parameter ``name`` (GetParameter, :func:`ssm`)."""
    value = ssm(region, "GetParameter", {"Name": name}).get("Parameter", {}).get("Value")
    if not isinstance(value, str):
        raise Failed(f"GetParameter {name}: no value in the answer")
    return value
