"""The big blueprints the benchmarks time, grown from the examples (one builder for every script).

* :func:`aws_blueprint`: ``aws-p5-efa-lustre`` with its GPU node group resized to N p5.48xlarge instances (above
  4,000 the compute subnet grows to a /19, which a /20 cannot hold);
* :func:`dgx_blueprint`: ``onprem-dgx-h100-ib`` with N DGX hosts (addresses from 10.1.0.0/16, IPoIB in 192.168.0.0/16, 8
  NICs a host: up to 8,000 hosts; it holds the example's Lustre MGS NIDs).

Both write the YAML to a directory the caller owns and return its path.
"""

from __future__ import annotations

import io
import ipaddress
from pathlib import Path

from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "blueprints" / "examples"
AWS_EXAMPLE = EXAMPLES / "aws-p5-efa-lustre.yaml"
DGX_EXAMPLE = EXAMPLES / "onprem-dgx-h100-ib.yaml"


def _write(data: object, path: Path) -> Path:
    buf = io.StringIO()
    YAML().dump(data, buf)
    path.write_text(buf.getvalue())
    return path


def aws_blueprint(count: int, directory: Path) -> Path:
    """``aws-p5-efa-lustre`` with ``count`` GPU instances, written to ``directory/p5-<count>.yaml``."""
    data = YAML().load(AWS_EXAMPLE.read_text())
    data["node_groups"][0]["count"] = count
    if count > 4000:
        data["target"]["vpc"] = {"subnet_cidr_block": "10.0.32.0/19"}
    return _write(data, directory / f"p5-{count}.yaml")


def dgx_blueprint(hosts: int, directory: Path) -> Path:
    """``onprem-dgx-h100-ib`` with ``hosts`` DGX hosts (at most 65,534), written to ``directory/dgx-<hosts>.yaml``."""
    data = YAML().load(DGX_EXAMPLE.read_text())
    addresses = ipaddress.ip_network("10.1.0.0/16").hosts()
    dgx = next(g for g in data["node_groups"] if g["name"] == "dgx")
    dgx["hosts"] = [{"name": f"dgx-{i:05d}", "address": str(next(addresses))} for i in range(hosts)]
    data["network"]["infiniband"]["ipoib"]["cidr"] = "192.168.0.0/16"
    return _write(data, directory / f"dgx-{hosts}.yaml")
