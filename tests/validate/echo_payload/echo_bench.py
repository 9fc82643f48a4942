"""A standalone payload of the test suite ``echo``: writes ``{"kind": "echo", "value": V, "host": ...}``
to ``--output`` (standard library only, like every payload)."""

import argparse
import json
import socket

p = argparse.ArgumentParser()
p.add_argument("--value", type=float, required=True)
p.add_argument("--output", required=True)
a = p.parse_args()
with open(a.output, "w") as f:
    json.dump({"kind": "echo", "value": a.value, "host": socket.gethostname()}, f)
