"""The software compatibility table (``docs/software-compatibility.md``), generated from the catalog.

Every row is read from the catalog entry the ``check`` rules and the defaults read
(``software-catalog.yaml`` and the edges it names in ``catalog-extras.yaml`` / ``hardware-catalog.yaml``),
with the entry's source, so the document cannot drift from what is enforced. Regenerate with
``python -m blueprints.compatibility``; a test compares the committed file with this output.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .catalog import Catalog, catalog

COMPATIBILITY_PATH = Path(__file__).resolve().parent.parent / "docs" / "software-compatibility.md"

__all__ = ["COMPATIBILITY_PATH", "compatibility_markdown", "main"]


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out + [""]


def _api(row: dict[str, Any]) -> str:
    """A ``net_plugin_api`` range as ``v6-v12`` (empty when the row has none)."""
    api = row.get("net_plugin_api")
    return f"v{api[0]}-v{api[1]}" if api else ""


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def compatibility_markdown(cat: Catalog | None = None) -> str:
    """The Markdown document: one section per edge kind of the compatibility model, each row with its
    source URL. Pure function of the catalog."""
    cat = cat or catalog()
    sw, ex = cat.software, cat.extras
    lines = ["# Software compatibility", "",
             ("Generated from the catalog by `python -m blueprints.compatibility` (do not edit): the edges `clusterforge "
              "check` enforces (rules in `blueprints/rules/stack.py` and `software.py`) and the defaults `software` "
              f"resolves to (`blueprints/software_stack.py`). Catalog as of {sw['as_of']}."), ""]

    lines += ["## GPU architecture → CUDA and driver", "",
              ("First CUDA toolkit and driver branch per architecture; the last CUDA major that still builds for it. "
               f"Source: {ex['driver_architectures']['source']}; last CUDA major: the toolkit release notes named in "
               "the row."), ""]
    gpus: dict[str, list[str]] = {}
    for k in cat.gpu_keys:
        g = cat.gpu(k)
        if g.vendor == "nvidia" and g.architecture:
            gpus.setdefault(g.architecture, []).append(k)
    last = sw["cuda_architecture_support"]["last_cuda_major"]
    rows = []
    for arch, row in ex["driver_architectures"]["architectures"].items():
        rows.append([arch, ", ".join(f"`{k}`" for k in gpus.get(arch, [])) or "—", row.get("first_cuda", "—"),
                     f"R{row['min_branch']}", f"R{row['max_branch']}" if row.get("max_branch") else "—",
                     f"{last[arch]['major']}.x ({last[arch]['source']})" if arch in last else "current"])
    lines += _table(["architecture", "catalog GPUs", "first CUDA", "first driver", "last driver", "last CUDA"], rows)

    cdm = ex["cuda_driver_minimums"]
    lines += ["## CUDA toolkit → driver branch", "",
              (f"The branch each toolkit shipped with ({cdm['source']}). Minor-version compatibility: any toolkit of a "
               f"major runs on that major's first branch, with limits ({sw['cuda_compat']['minor_version']['source']})."),
              ""]
    majors = cdm["major_compatibility"]
    lines += _table(["CUDA", "native from", "minor-version compatible from"],
                    [[c, f"R{b}", f"R{majors[c.split('.')[0]]}" if c.split(".")[0] in majors else "—"]
                     for c, b in cdm["toolkit"].items()])
    fwd = sw["cuda_compat"]["forward"]
    lines += ["### Forward compatibility", "",
              (f"`software.cuda_compat: true` installs `{fwd['package']}`: a newer CUDA on an older branch, on NVIDIA "
               f"data-centre GPUs only ({', '.join('`' + g + '`' for g in sw['cuda_compat']['datacenter_gpus'])}), on "
               f"these base branches ({fwd['source']}; branches: {fwd['field_sources']['base_branches']}):"), ""]
    lines += _table(["CUDA major", "base branches"],
                    [[f"{m}.x", ", ".join(f"R{b}" for b in bs)] for m, bs in fwd["base_branches"].items()])

    rel = sw["nccl_releases"]
    lines += ["## NCCL", "", (f"Builds per release (`<nccl>-1+cuda<X.Y>`, {rel['source']}) and the net-plugin API "
                              f"versions it loads ({rel['field_sources']['net_plugin_api']}, per tag):"), ""]
    lines += _table(["NCCL", "CUDA builds", "loads net API", "source"],
                    [[v, ", ".join(map(str, r["cuda_builds"])), _api(r), r["source"]]
                     for v, r in sorted(rel["releases"].items(), key=lambda kv: _vkey(kv[0]))])
    f = sw["nccl_features"]
    feat_rows = [["NVLS (NVLink SHARP)", f["nvls"]["needs"], f["nvls"]["min_nccl"], f["nvls"]["source"]],
                 ["multi-node NVLink", f["mnnvl"]["needs"], f["mnnvl"]["min_nccl"], f["mnnvl"]["source"]]]
    feat_rows += [[f"{a} GPUs", a, r["min_nccl"], r["source"]] for a, r in f["architectures"].items()]
    feat_rows += [[f"GPUDirect RDMA `{m}`", "the method `network.gpudirect_rdma` declares", r["min_nccl"], r["source"]]
                  for m, r in ex["nccl_gpudirect"].items()]
    lines += ["What the hardware needs from NCCL:", ""]
    lines += _table(["feature", "needed by", "first NCCL", "source"], feat_rows)

    ofi = sw["aws_ofi_nccl"]
    lines += ["## aws-ofi-nccl and EFA", "", (f"Plugin releases ({ofi['source']}; exported API: "
                                              f"{ofi['field_sources']['net_plugin_api']}, per tag):"), ""]
    lines += _table(["aws-ofi-nccl", "date", "oldest NCCL", "tested with NCCL", "exports net API"],
                    [[v, r["date"], r["min_nccl"], r["tested_nccl"], _api(r)]
                     for v, r in sorted(ofi["releases"].items(), key=lambda kv: _vkey(kv[0]))])
    p5 = cat.efa["software"]["p5_min_versions"]
    fam_rows = [[f"`{fam}`", r["min_version"], r["source"]] for fam, r in ofi["instance_families"].items()]
    lines += ["First plugin release per EFA instance family (older ones run it with generic defaults); p5-class "
              f"minimums of the whole stack ({cat.efa['software']['field_sources']['p5_min_versions']}): "
              + ", ".join(f"{k} {v}" for k, v in p5.items()) + ".", ""]
    lines += _table(["family", "first aws-ofi-nccl", "source"], fam_rows)
    caps = []
    for name in cat.instance_type_names:
        it = cat.instance_type(name)
        rdma = it.raw.get("efa_rdma")
        if rdma is not None and it.gpu_count:
            caps.append([f"`{name}`", "yes" if rdma.get("read") else "no", "yes" if rdma.get("write") else "no"])
    env = sw["efa_env_capabilities"]
    lines += ["EFA RDMA per GPU instance type (hardware catalog `efa_rdma`, "
              "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types); variables that ask "
              "for a capability: " + ", ".join(f"`{e['name']}` → RDMA {e['needs'].split('_')[1]} ({e['source']})"
                                                for e in env) + ".", ""]
    lines += _table(["instance type", "RDMA read", "RDMA write"], caps)

    ct = sw["container_toolkit"]
    lines += ["## NVIDIA Container Toolkit", "", f"Needs {ct['rule']} ({ct['source']}).", ""]

    pt = sw["pytorch"]
    lines += ["## PyTorch wheels", "", (f"Index `{pt['index_url']}`; a tag's wheels carry no kernels for an architecture "
                                         "its CUDA does not build for, nor for the architectures the release drops."), ""]
    lines += _table(["PyTorch", "Python", "tag → CUDA", "dropped architectures", "source"],
                    [[v, ", ".join(r["python"]), ", ".join(f"`{t}` {c}" for t, c in r["cuda_tags"].items()),
                      "; ".join(f"`{t}`: {', '.join(a)}" for t, a in (r.get("dropped") or {}).items()) or "—",
                      r["source"]] for v, r in pt["releases"].items()])
    ngc = sw["ngc_pytorch"]
    lines += ["## NGC PyTorch containers", "", f"`{ngc['image']}`:", ""]
    lines += _table(["release", "CUDA", "PyTorch", "NCCL", "Python", "aws-ofi-nccl", "source"],
                    [[v, r["cuda"], r.get("pytorch", "—"), r.get("nccl", "—"), r.get("python", "—"),
                      r.get("aws_ofi_nccl", "—"), r["source"]]
                     for v, r in ngc["releases"].items()])

    lines += ["## Defaults", "", ("Unset `software` fields take the first row whose CUDA the driver branch "
                                  f"(default R{cat.bare_metal['nvidia_driver']['default_branch']}) runs natively and whose "
                                  "CUDA and wheels build for every declared GPU (on a branch older than every row, the "
                                  "newest toolkit of the last row's major that the branch runs natively); the EFA "
                                  "installer defaults to "
                                  f"{sw['efa_installer']['default']}, the newest release whose SHA-256 the catalog pins; "
                                  "the container to the newest listed release the driver runs."), ""]
    lines += _table(["CUDA", "NCCL", "aws-ofi-nccl", "PyTorch", "wheel tag"],
                    [[r["cuda"], r["nccl"], r["aws_ofi_nccl"], r["pytorch"], f"`{r['pytorch_cuda']}`"]
                     for r in sw["defaults"]])
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write ``docs/software-compatibility.md`` (or the path given as the only argument)."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else COMPATIBILITY_PATH
    path.write_text(compatibility_markdown(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
