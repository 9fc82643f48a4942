"""Hardware catalog: typed, read-only accessors over ``blueprints/data/hardware-catalog.yaml``.

The YAML file is the project's reference catalog copied verbatim (every entry has a ``source``
URL); ``catalog-extras.yaml`` adds GPU name aliases and small lists, each with its source.
Rules, renderers and the validation judge read hardware facts only through this module, never
from literals in code.

Units follow the data file: GPU TFLOP/s are dense (no sparsity), ``nvlink_*_gbytes_s`` and HBM
figures are GB/s (1e9 bytes/s) or TB/s, network figures are Gbit/s (1e9 bit/s), FSx figures are
MB/s (1e6 bytes/s) per TiB of storage.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Catalog",
    "DriverRange",
    "GpuSpec",
    "InstanceTypeSpec",
    "RuntimeRelease",
    "UnknownHardwareError",
    "catalog",
    "ec2_instance_type_names",
    "prices",
]


class UnknownHardwareError(KeyError):
    """Raised when a GPU model, instance type or other catalog key is not known.

    ``str(err)`` names the key and lists the known ones.
    """

    def __init__(self, kind: str, key: str, known: list[str]):
        self.kind, self.key, self.known = kind, key, known
        super().__init__(f"unknown {kind} {key!r}; known: {', '.join(sorted(known))}")

    def __str__(self) -> str:  # KeyError quotes its argument; we want plain text
        return str(self.args[0])


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model.

    Attributes: ``key`` (catalog key, e.g. ``h100-sxm``), ``memory_gb`` (vendor GB),
    ``bf16_dense_tflops`` / ``fp16_dense_tflops`` / ``fp32_tflops`` (TFLOP/s, dense, may be
    ``None`` when no source gave it), ``nvlink_unidir_gbytes_s`` (GB/s per GPU per direction,
    ``None`` for PCIe-only parts), ``source`` (URL).
    """

    key: str
    vendor: str
    architecture: str | None
    memory_gb: float | None
    hbm_tbps: float | None
    bf16_dense_tflops: float | None
    fp16_dense_tflops: float | None
    fp8_dense_tflops: float | None
    tf32_dense_tflops: float | None
    fp32_tflops: float | None
    nvlink_gen: int | None
    nvlink_unidir_gbytes_s: float | None
    nvlink_bidir_gbytes_s: float | None
    tdp_w: float | None
    source: str
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def has_nvlink(self) -> bool:
        """True when the part has NVLink (SXM); PCIe cards (L40S, L4, H100 PCIe) do not."""
        return bool(self.nvlink_unidir_gbytes_s)

    @property
    def supports_bf16(self) -> bool:
        """True for Ampere and newer NVIDIA parts and the other vendors' parts with bf16 TFLOP/s."""
        return self.bf16_dense_tflops is not None or self.architecture in {"ampere", "hopper", "blackwell", "ada"}

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak TFLOP/s for ``precision`` in {bf16, fp16, fp8, tf32, fp32}; ``None`` if unknown."""
        return {
            "bf16": self.bf16_dense_tflops,
            "fp16": self.fp16_dense_tflops,
            "fp8": self.fp8_dense_tflops,
            "tf32": self.tf32_dense_tflops,
            "fp32": self.fp32_tflops,
        }.get(precision)


@dataclass(frozen=True)
class InstanceStore:
    """Local NVMe instance store of an AWS instance type: ``count`` drives of ``size_gb`` GB."""

    count: int
    size_gb: int
    random_read_iops_4k: int | None
    write_iops_4k: int | None


@dataclass(frozen=True)
class InstanceTypeSpec:
    """One AWS accelerated instance type.

    ``network_gbps`` is the aggregate line rate in Gbit/s; ``max_efa_interfaces`` is EC2's
    ``EfaInfo.MaximumEfaInterfaces`` (``None`` if unknown, 0 if EFA is unsupported);
    ``network_cards`` is the number of network cards (one EFA per card); ``efa_rdma_read`` is
    whether the type's EFA supports RDMA read (``efa_rdma.read``; ``None`` if no source gave it).
    """

    name: str
    gpu_count: int
    gpu_key: str
    gpu_memory_gib_each: float | None
    vcpus: int | None
    memory_gib: float | None
    network_gbps: float
    network_cards: int
    max_efa_interfaces: int | None
    max_interfaces_per_card: int | None
    efa_generation: int | None
    gpudirect_rdma: bool | None
    efa_rdma_read: bool | None
    instance_store: InstanceStore | None
    capacity_blocks_supported: bool | None
    spot: bool | None
    requires_fabric_manager: bool
    source: str
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def efa_supported(self) -> bool:
        """True when the type supports at least one EFA interface."""
        return bool(self.max_efa_interfaces)

    @property
    def is_bare_metal(self) -> bool:
        """True for ``*.metal`` types (needed for VFIO GPU passthrough into Kata or VMs)."""
        return self.name.endswith(".metal") or ".metal-" in self.name

    @property
    def per_nic_gbps(self) -> float:
        """Line rate of one network card in Gbit/s (aggregate rate / network cards)."""
        return self.network_gbps / max(self.network_cards, 1)


@dataclass(frozen=True)
class DriverRange:
    """Driver branches that support one GPU: ``min_branch`` .. ``max_branch`` (``None`` = no
    maximum yet), optionally an exact ``min_driver`` release for the part; ``source`` (URL)."""

    architecture: str
    min_branch: int
    max_branch: int | None
    min_driver: str | None
    source: str


@dataclass(frozen=True)
class RuntimeRelease:
    """One release of a sandbox runtime with a GPU driver allow-list: ``runtime`` (``gvisor`` /
    ``kata``), ``release``, the exact ``drivers`` it supports, ``driver_on`` (``host`` for gVisor's
    nvproxy, ``guest`` for Kata's GPU guest image) and the ``source`` (URL) of the list."""

    runtime: str
    release: str
    drivers: tuple[str, ...]
    driver_on: str
    source: str


def _vkey(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".") if x.isdigit())


CATALOG_FILES = ("hardware-catalog.yaml", "catalog-extras.yaml", "aws-catalog.yaml", "software-catalog.yaml")
"""The data files of the catalog under ``blueprints/data``: facts, extras, AWS software facts, the software
compatibility model."""


def _data_files(names: tuple[str, ...]) -> dict[str, bytes]:
    """``{name: bytes}`` of the package data files ``names`` (``blueprints/data``)."""
    here = os.path.join(os.path.dirname(__file__), "data")
    if os.path.isdir(here):  # an installed or source tree (importlib.resources costs ~15 ms to import)
        out = {}
        for name in names:
            with open(os.path.join(here, name), "rb") as f:
                out[name] = f.read()
        return out
    from importlib import resources  # a zip import

    root = resources.files("blueprints").joinpath("data")
    return {name: root.joinpath(name).read_bytes() for name in names}


def _load_yaml(name: str) -> dict[str, Any]:
    """One data file, parsed (through the parse cache of :mod:`blueprints.datacache`)."""
    return _load_catalog_files((name,))[name]


def _load_catalog_files(names: tuple[str, ...] = CATALOG_FILES) -> dict[str, dict[str, Any]]:
    """``{name: parsed data}`` of the catalog data files ``names``: read from the package, parsed from
    the user's parse cache when it holds these exact bytes (:mod:`blueprints.datacache`), else with
    libyaml's safe loader."""
    from .datacache import parsed_yaml_files

    parsed = parsed_yaml_files("catalog" if names == CATALOG_FILES else "catalog-" + "-".join(names),
                               _data_files(names))
    for name, data in parsed.items():
        assert isinstance(data, dict), name
    return parsed


def _opt_float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _gpu_name(name: str) -> str:
    """``name`` as the GPU name tables are keyed: lower case, runs of white space as one space."""
    return " ".join(name.split()).lower()


class Catalog:
    """Typed view of the hardware catalog. Obtain the shared instance with :func:`catalog`.

    Raises :class:`UnknownHardwareError` from the lookup methods for keys it does not know.
    """

    def __init__(self, data: dict[str, Any], extras: dict[str, Any], aws: dict[str, Any] | None = None,
                 software: dict[str, Any] | None = None):
        self.data = data
        self.extras = extras
        self.aws = aws if aws is not None else _load_yaml("aws-catalog.yaml")
        """AWS facts of ``aws-catalog.yaml`` (EFA software paths and environment, DLAMI, EKS versions,
        KVM, image directories, FSx), each section with its ``source``."""
        self.software = software if software is not None else _load_yaml("software-catalog.yaml")
        """The software compatibility model of ``software-catalog.yaml`` (CUDA compatibility rules, NCCL
        releases and features, aws-ofi-nccl / EFA installer per instance family, PyTorch wheels, NGC
        containers, the default stacks), each edge with its ``source``; read through
        :mod:`blueprints.software_stack`."""
        self._gpus = {k: self._gpu(k, v) for k, v in data["gpus"].items()}
        self._instances = {k: self._instance(k, v) for k, v in data["aws_instance_types"].items()}
        aliases = extras["gpu_aliases"]
        self._gpu_aliases: dict[str, str] = {}
        for table in ("names", "short_names"):
            for name, key in aliases[table].items():
                self._gpu_aliases[name.lower()] = key
        for k in self._gpus:
            self._gpu_aliases[k.lower()] = k
        self._vendor_words = {w.lower() for ws in aliases.get("vendor_words", {}).values() for w in ws}
        # a short name stands for every key that starts with it and a dash (`h100` -> h100-pcie, h100-sxm)
        self._gpu_parts: dict[str, list[str]] = {
            short.lower(): sorted(k for k in self._gpus if k.startswith(f"{short.lower()}-"))
            for short in aliases["short_names"]}

    @property
    def bare_metal(self) -> dict[str, Any]:
        """The ``bare_metal`` section (plain data, every entry with a ``source`` URL): NVIDIA driver
        branches and packages, CUDA and DOCA repositories, container toolkit, Lustre client, Kata,
        gVisor, and the other vendor facts of the bare-metal roles."""
        return self.extras["bare_metal"]

    # ---- GPUs -------------------------------------------------------------------------------
    @staticmethod
    def _gpu(key: str, v: dict[str, Any]) -> GpuSpec:
        return GpuSpec(
            key=key,
            vendor=v.get("vendor", "unknown"),
            architecture=v.get("architecture"),
            memory_gb=_opt_float(v.get("memory_gb", v.get("memory_gib"))),
            hbm_tbps=_opt_float(v.get("hbm_tbps")),
            bf16_dense_tflops=_opt_float(v.get("bf16_dense_tflops")),
            fp16_dense_tflops=_opt_float(v.get("fp16_dense_tflops")),
            fp8_dense_tflops=_opt_float(v.get("fp8_dense_tflops")),
            tf32_dense_tflops=_opt_float(v.get("tf32_dense_tflops")),
            fp32_tflops=_opt_float(v.get("fp32_tflops")),
            nvlink_gen=v.get("nvlink_gen"),
            nvlink_unidir_gbytes_s=_opt_float(v.get("nvlink_unidir_gbytes_s")),
            nvlink_bidir_gbytes_s=_opt_float(v.get("nvlink_bidir_gbytes_s")),
            tdp_w=_opt_float(v.get("tdp_w")),
            source=v.get("source", ""),
            raw=v,
        )

    @property
    def gpu_keys(self) -> list[str]:
        """Catalog GPU keys, e.g. ``['a100-40gb-sxm', ..., 'h100-sxm', ...]``."""
        return list(self._gpus)

    def gpu_parts(self, name: str) -> list[str]:
        """The catalog GPU keys a short name can stand for: every key that starts with the short name
        and a dash, sorted (``h100`` -> ``['h100-pcie', 'h100-sxm']``; ``h200`` -> ``['h200-sxm']``).
        ``[]`` when ``name`` is not one of the catalog's short names (``gpu_aliases.short_names``: a
        key, an ``nvidia-smi`` name or an unknown name)."""
        return list(self._gpu_parts.get(_gpu_name(name), []))

    @property
    def provisioned_gpu_keys(self) -> list[str]:
        """Catalog GPU keys clusterforge can provision: the NVIDIA parts (it installs the NVIDIA driver,
        CUDA, NCCL and container toolkit; the catalog's AMD and Trainium entries only describe AWS
        instance types). Suggestions for an unknown GPU name come from this list."""
        return [k for k, g in self._gpus.items() if g.vendor == "nvidia"]

    def resolve_gpu_key(self, name: str) -> str | None:
        """Map a key, short name (``h100``) or ``nvidia-smi`` name to a catalog key, or ``None``.

        The vendor words in front of a key or short name are ignored (``NVIDIA h100-sxm``; ``AMD Instinct MI325X``,
        the name rocm-smi and rccl-tests print, is ``mi325x``): the words of catalog ``gpu_aliases.vendor_words``.
        """
        low = _gpu_name(name)
        key = self._gpu_aliases.get(low)
        words = low.split(" ")
        while key is None and len(words) > 1 and words[0] in self._vendor_words:
            words = words[1:]
            key = self._gpu_aliases.get(" ".join(words))
        return key

    def generic_gpu_name(self, name: str) -> bool:
        """True for a name a driver gives a GPU it does not yet know by its marketing name (``NVIDIA Graphics
        Device``: catalog ``gpu_aliases.generic_names``, source ``generic_source``): it names the vendor only."""
        generic = {_gpu_name(n) for n in self.extras["gpu_aliases"].get("generic_names", [])}
        return _gpu_name(name) in generic

    def gpu_name_vendor(self, name: str) -> str | None:
        """The vendor (``nvidia``, ``amd``) a GPU name as a log prints it belongs to: the catalog key's vendor
        when the name is known, else the vendor whose words (catalog ``gpu_aliases.vendor_words``: ``NVIDIA``,
        ``Tesla`` ...; ``AMD``, ``Instinct`` ...) start the name; ``None`` when neither says."""
        key = self.resolve_gpu_key(name)
        if key is not None:
            return self._gpus[key].vendor
        first = _gpu_name(name).split(" ")[0] if name.strip() else ""
        for vendor, words in self.extras["gpu_aliases"].get("vendor_words", {}).items():
            if first in {w.lower() for w in words}:
                return str(vendor)
        return None

    def gpu(self, name: str) -> GpuSpec:
        """The :class:`GpuSpec` for a catalog key, short name or ``nvidia-smi`` name.

        Raises :class:`UnknownHardwareError` when the name is not known.
        """
        key = self.resolve_gpu_key(name)
        if key is None:
            raise UnknownHardwareError("GPU model", name, self.gpu_keys)
        return self._gpus[key]

    # ---- AWS instance types ------------------------------------------------------------------
    @staticmethod
    def _instance(name: str, v: dict[str, Any]) -> InstanceTypeSpec:
        acc = v.get("accelerators") or {}
        store = v.get("instance_store")
        cb = v.get("capacity_blocks") or {}
        return InstanceTypeSpec(
            name=name,
            gpu_count=int(acc.get("count", 0)),
            gpu_key=str(acc.get("type", "")),
            gpu_memory_gib_each=_opt_float(acc.get("memory_gib_each")),
            vcpus=v.get("vcpus"),
            memory_gib=_opt_float(v.get("memory_gib")),
            network_gbps=float(v.get("network_gbps", 0)),
            network_cards=int(v.get("network_cards", 1)),
            max_efa_interfaces=v.get("max_efa_interfaces"),
            max_interfaces_per_card=v.get("max_interfaces_per_card"),
            efa_generation=v.get("efa_generation"),
            gpudirect_rdma=v.get("gpudirect_rdma"),
            efa_rdma_read=(v.get("efa_rdma") or {}).get("read"),
            instance_store=InstanceStore(
                count=int(store["count"]),
                size_gb=int(store["size_gb"]),
                random_read_iops_4k=store.get("random_read_iops_4k"),
                write_iops_4k=store.get("write_iops_4k"),
            )
            if store
            else None,
            capacity_blocks_supported=cb.get("supported"),
            spot=v.get("spot"),
            requires_fabric_manager=bool(v.get("requires_nvidia_fabric_manager", acc.get("count", 0) >= 8)),
            source=v.get("source", ""),
            raw=v,
        )

    @property
    def instance_type_names(self) -> list[str]:
        """Known AWS instance type names."""
        return list(self._instances)

    def instance_type(self, name: str) -> InstanceTypeSpec:
        """The :class:`InstanceTypeSpec` for an AWS instance type name.

        Raises :class:`UnknownHardwareError` when the type is not in the catalog.
        """
        try:
            return self._instances[name]
        except KeyError:
            raise UnknownHardwareError("instance type", name, self.instance_type_names) from None

    # ---- other sections (raw, with their sources) --------------------------------------------
    @property
    def fsx(self) -> dict[str, Any]:
        """The ``fsx_lustre`` section: deployment types, capacity steps, throughput options."""
        return self.data["fsx_lustre"]

    @property
    def efa(self) -> dict[str, Any]:
        """The ``efa`` section: security group, subnet, placement and interface rules."""
        return self.data["efa"]

    @property
    def capacity_blocks(self) -> dict[str, Any]:
        """The ``capacity_blocks`` section (placement, AZ and size limits)."""
        return self.data["capacity_blocks"]

    @property
    def fabrics(self) -> dict[str, Any]:
        """The ``fabrics`` section: InfiniBand generations, adapters, NVLink, rail layouts."""
        return self.data["fabrics"]

    @property
    def systems(self) -> dict[str, Any]:
        """DGX-class systems (``dgx-h100`` ...)."""
        return self.data["systems"]

    @property
    def storage_devices(self) -> dict[str, Any]:
        """Data-centre NVMe drives with sequential MB/s and random IOPS."""
        return self.data["storage_devices"]

    @property
    def reference_benchmarks(self) -> dict[str, Any]:
        """Published NCCL busbw and MFU reference numbers, each with its source."""
        return self.data["reference_benchmarks"]

    @property
    def gvisor_supported_gpus(self) -> list[str]:
        """GPU keys gVisor's nvproxy supports (source in ``catalog-extras.yaml``)."""
        return list(self.extras["gvisor_nvproxy"]["supported_gpus"])

    # ---- NVIDIA driver ------------------------------------------------------------------------
    def driver_range(self, gpu: GpuSpec) -> DriverRange | None:
        """The driver branches that support ``gpu`` (by architecture, plus a per-part exact minimum
        release where the catalog has one); ``None`` for non-NVIDIA parts or unknown architectures."""
        table = self.extras["driver_architectures"]
        row = table["architectures"].get(gpu.architecture or "") if gpu.vendor == "nvidia" else None
        if row is None:
            return None
        part = table.get("parts", {}).get(gpu.key) or {}
        return DriverRange(architecture=str(gpu.architecture), min_branch=int(row["min_branch"]),
                           max_branch=int(row["max_branch"]) if row.get("max_branch") else None,
                           min_driver=part.get("min_driver"), source=str(part.get("source") or table["source"]))

    def driver_releases(self, branch: str) -> list[str]:
        """Known releases of driver ``branch`` (``"550"`` or ``"550.90"``: the first number is the
        branch), oldest first; empty when the catalog lists none."""
        row = self.extras["driver_releases"]["branches"].get(branch.split(".")[0])
        return sorted((str(r) for r in row["releases"]), key=_vkey) if row else []

    def driver_release(self, branch: str) -> str | None:
        """The release ``software.driver_version`` takes when only ``branch`` is pinned, or ``None``
        when the catalog knows no release of the branch. Source: ``driver_releases.source``."""
        row = self.extras["driver_releases"]["branches"].get(branch.split(".")[0])
        return str(row["default"]) if row else None

    def runtime_releases(self, runtime: str) -> list[RuntimeRelease]:
        """Every catalogued release of sandbox ``runtime`` (``gvisor``, ``kata``) with its driver
        allow-list, oldest first; empty for a runtime without one."""
        entry = self.extras["sandbox_runtimes"].get(runtime)
        if not entry:
            return []
        out = [RuntimeRelease(runtime, str(k), tuple(str(d) for d in v["drivers"]), str(entry["driver_on"]),
                              str(v["source"])) for k, v in entry["releases"].items()]
        return sorted(out, key=lambda r: _vkey(r.release))

    def runtime_release(self, runtime: str, release: str) -> RuntimeRelease | None:
        """The catalogued ``release`` of ``runtime``; ``latest`` means the newest catalogued one.
        A leading ``v`` and a ``release-`` prefix are ignored. ``None`` when not catalogued."""
        rels = self.runtime_releases(runtime)
        if not rels:
            return None
        if release == "latest":
            return rels[-1]
        want = release.removeprefix("release-").lstrip("v")
        return next((r for r in rels if r.release == want), None)

    @property
    def nccl_env_fast_paths(self) -> list[dict[str, Any]]:
        """The NCCL / libfabric variables that switch off or narrow a declared fast path: dicts with
        ``name``, ``values`` (strings; ``*`` = any), ``except`` (values that are harmless where
        ``values`` is ``*``; may be empty), ``effect`` (``disables``/``narrows``), ``needs``,
        ``switches_off`` and ``source`` (the row's own URL, else the table's). A row's
        ``values_from`` (a dotted catalog path, e.g. ``aws.efa_software.disable_device_rdma.X``)
        is resolved into ``values`` so a value clusterforge itself writes is kept once.
        Source: ``nccl_env_fast_paths.source`` (the NCCL environment variable reference)."""
        table = self.extras["nccl_env_fast_paths"]
        out = []
        for row in table["variables"]:
            r = dict(row)
            if "values_from" in r:
                node: Any = {"aws": self.aws, **self.extras}
                for part in str(r.pop("values_from")).split("."):
                    node = node[part]
                r["values"] = [node]
            r["values"] = [str(v) for v in r["values"]]
            r["except"] = [str(v) for v in r.get("except", [])]
            r.setdefault("source", table["source"])
            out.append(r)
        return out

    def fast_paths_switched_off(self, name: str, value: str) -> list[dict[str, Any]]:
        """The rows of :meth:`nccl_env_fast_paths` that the setting ``name=value`` matches (value compared
        case-insensitively; a row of ``*`` matches every value but its ``except`` list), in table order."""
        val = value.strip().lower()
        out = []
        for row in self.nccl_env_fast_paths:
            if row["name"] != name:
                continue
            values = [v.lower() for v in row["values"]]
            if ("*" in values and val not in [v.lower() for v in row["except"]]) or val in values:
                out.append(row)
        return out

    @property
    def mnnvl_gpus(self) -> list[str]:
        """GPU keys whose nodes join a multi-node NVLink domain (GB200 NVL72), where NCCL's
        multi-node NVLink carries inter-node traffic. Source: ``nccl_env_fast_paths.mnnvl_source``."""
        return [str(k) for k in self.extras["nccl_env_fast_paths"].get("mnnvl_gpus", [])]

    def infiniband_port_gbps(self, generation: str) -> float:
        """4x port rate in Gbit/s for an InfiniBand generation (``NDR`` -> 400).

        Raises :class:`UnknownHardwareError` for an unknown generation.
        """
        ib = {k: v for k, v in self.fabrics["infiniband"].items() if isinstance(v, dict)}
        try:
            return float(ib[generation.upper()]["port_4x_gbps"])
        except KeyError:
            raise UnknownHardwareError("InfiniBand generation", generation, list(ib)) from None

    @property
    def achievable_fraction(self) -> float:
        """Rule-of-thumb fraction of line rate a collective achieves (0.8), from the catalog."""
        return float(self.fabrics["rule_of_thumb_achievable_fraction"])


@functools.cache
def catalog() -> Catalog:
    """The shared :class:`Catalog`, loaded once from the package data."""
    files = _load_catalog_files()
    return Catalog(*(files[name] for name in CATALOG_FILES))


@functools.cache
def prices() -> dict[str, Any]:
    """The price catalog ``blueprints/data/prices.yaml`` as plain data (USD; every number with ``source`` and
    ``as_of``): EC2 instance-hours per capacity type and region, EBS, FSx for Lustre, NAT gateway, public IPv4,
    EKS, monthly charges of one resource (``per_resource``), the usage-based types (``usage_based``), the resource
    types with no charge of their own (``no_charge``), and the on-prem defaults. Read by
    :mod:`clusterforge.cost`; a user's refreshed prices are laid over it there."""
    return _load_yaml("prices.yaml")


@functools.cache
def ec2_instance_type_names() -> frozenset[str]:
    """Every EC2 instance type name the installed ``pulumi_aws`` provider knows
    (``pulumi_aws.ec2.InstanceType``, generated from the EC2 API model), e.g. ``m6i.2xlarge``.

    The names are read from the enum's generated source (``pulumi_aws/ec2/_enums.py``) without
    importing the provider SDK, which costs about a second of ``clusterforge check``; when that file
    is missing or not in the generated shape the enum itself is imported. Raises ``ImportError``
    when ``pulumi_aws`` is not installed.
    """
    names = _instance_type_names_from_source()
    if names:
        return names
    import warnings

    with warnings.catch_warnings():  # the SDK warns about its own deprecated resources on import
        warnings.simplefilter("ignore", DeprecationWarning)
        from pulumi_aws.ec2 import InstanceType  # the provider SDK is large: only as a fallback

    return frozenset(str(m.value) for m in InstanceType)


_ENUM_MEMBER = re.compile(r'^    [A-Z][A-Z0-9_]* = "([^"\\]+)"$')


def _instance_type_names_from_source() -> frozenset[str]:
    """The string values of ``class InstanceType`` in ``pulumi_aws/ec2/_enums.py``, read as text
    (``    P5_48_X_LARGE = "p5.48xlarge"`` lines up to the next top-level statement); empty when the
    package or the file is missing or the class has no such member lines."""
    from importlib.util import find_spec
    from pathlib import Path

    spec = find_spec("pulumi_aws")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    for root in spec.submodule_search_locations:
        path = Path(root) / "ec2" / "_enums.py"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        start = text.find("\nclass InstanceType(")
        if start < 0:
            continue
        names: set[str] = set()
        for line in text[start + 1:].splitlines()[1:]:
            if line and not line[0].isspace():
                break  # the next top-level statement ends the class body
            m = _ENUM_MEMBER.match(line)
            if m:
                names.add(m.group(1))
        return frozenset(names)
    return frozenset()
