"""Stand-ins for the nccl_stack role's downloads, built at test time with the vendors' names, versions and layout.

* NCCL's packages as NVIDIA's CUDA repository carries them (names and ``<nccl>-1+cuda<X.Y>`` versions from the catalog,
  ``nccl_stack``): ``libnccl2`` with a real shared library ``libnccl.so.<version>`` (soname ``libnccl.so.2``) built
  here with the host's gcc, whose ``ncclGetVersion`` answers the release's version code, and ``libnccl-dev`` (Depends:
  ``libnccl2 (= same version)``, as NVIDIA's) with ``nccl.h`` (``NCCL_MAJOR`` ... ``NCCL_VERSION_CODE``) and the
  ``libnccl.so`` link; an older and a newer release beside the pinned one, so a converge that does not pin takes the
  wrong one visibly.
* The CUDA compiler and runtime headers of the stack's CUDA (``cuda-nvcc-12-4``, ``cuda-cudart-dev-12-4`` under
  ``/usr/local/cuda-12.4``). This machine has no CUDA compiler: the stand-in ``nvcc`` hands the stand-in sources, which
  are plain C++, to the node's g++.
* A source release of nccl-tests with NVIDIA's layout: ``nccl-tests-<version>/Makefile`` (``src.build``) and
  ``src/Makefile`` with NVIDIA's make variables (``CUDA_HOME``, ``NCCL_HOME``, ``MPI``, ``MPI_HOME``, ``NVCC``,
  ``BUILDDIR``; ``-I$(NCCL_HOME)/include``, ``-DMPI_SUPPORT -I$(MPI_HOME)/include``, ``-L$(MPI_HOME)/lib -lmpi``,
  ``-lnccl``) building ``build/<collective>_perf``. Its sources are not NVIDIA's: they include ``nccl.h`` (and
  ``mpi.h`` with ``MPI_SUPPORT``), call ``ncclGetVersion`` and ``MPI_Get_library_version`` and print nccl-tests'
  own version line (``# nccl-tests version 2.17.6 nccl-headers=22304 nccl-library=22304``), then say they measure
  nothing and exit 2.

  What the stand-in build proves: the role downloads the archive and checks its SHA-256 before unpacking; it runs
  the top-level ``make`` with ``MPI=1`` and the catalog's ``MPI_HOME``, ``CUDA_HOME`` and ``NCCL_HOME``; the pinned
  NCCL's headers are found under ``NCCL_HOME`` and Open MPI's ``mpi.h`` / ``libmpi.so`` under the Debian ``MPI_HOME``
  (real Debian packages, real g++); the binaries link against the installed ``libnccl.so`` and run against it; the
  build fails where the real one would when ``NCCL_HOME`` has no ``nccl.h`` or the archive is not the pinned one.
  What it does not prove: that NVIDIA's sources compile with the real nvcc of that CUDA for the node's GPU
  architectures (``NVCC_GENCODE``), or that the binaries move any data.
* PyTorch's wheel index layout (``<index>/torch/``, PEP 503 as ``http.server``'s directory listing serves it) with
  tiny stand-in ``torch`` wheels: the pinned release for the index's CUDA tag (``2.6.0+cu124``) and a newer one
  (``2.7.0+cu124``), so an unpinned install visibly takes the wrong one. The stand-in module has ``__version__``
  and ``version.cuda``; it is not PyTorch.
"""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import tarfile
import zipfile
from pathlib import Path

from blueprints.catalog import catalog
from blueprints.settings import NcclStackSettings

from .vendor_repo import Deb, _script

MULTIARCH = "x86_64-linux-gnu"
"""The stand-ins are amd64 packages (the Debian root's architecture)."""


def nccl_code(version: str) -> int:
    """``NCCL_VERSION_CODE`` of ``X.Y.Z``: ``X*10000 + Y*100 + Z`` from 2.9 on, ``X*1000 + Y*100 + Z`` before
    (nccl.h's ``NCCL_VERSION`` macro, https://github.com/NVIDIA/nccl/blob/master/src/nccl.h.in)."""
    x, y, z = (int(p) for p in version.split(".")[:3])
    return x * 1000 + y * 100 + z if (x <= 2 and y <= 8) else x * 10000 + y * 100 + z


def _header(version: str) -> str:
    x, y, z = version.split(".")[:3]
    return (f"/* clusterforge stand-in of NCCL {version}'s nccl.h: the version macros and ncclGetVersion */\n"
            "#ifndef NCCL_H_\n#define NCCL_H_\n"
            f"#define NCCL_MAJOR {x}\n#define NCCL_MINOR {y}\n#define NCCL_PATCH {z}\n#define NCCL_SUFFIX \"\"\n"
            f"#define NCCL_VERSION_CODE {nccl_code(version)}\n"
            "#define NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : "
            "(X) * 10000 + (Y) * 100 + (Z))\n"
            "#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
            "typedef enum { ncclSuccess = 0 } ncclResult_t;\nncclResult_t ncclGetVersion(int *version);\n"
            "#ifdef __cplusplus\n}\n#endif\n#endif\n")


def _library(version: str, work: Path) -> bytes:
    """A real ``libnccl.so`` (soname ``libnccl.so.2``) whose ``ncclGetVersion`` answers ``version``'s code."""
    work.mkdir(parents=True, exist_ok=True)
    src, out = work / f"nccl-{version}.c", work / f"libnccl.so.{version}"
    src.write_text("typedef enum { ncclSuccess = 0 } ncclResult_t;\n"
                   f"ncclResult_t ncclGetVersion(int *v) {{ *v = {nccl_code(version)}; return ncclSuccess; }}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", str(out), str(src)], check=True,
                   capture_output=True)
    return out.read_bytes()


def nccl_packages(nccl: str, version: str, cuda: str, work: Path) -> list[Deb]:
    """``libnccl2`` and ``libnccl-dev`` of NCCL ``nccl`` at package version ``version`` (``2.28.9-1+cuda13.0``, the
    stack's ``nccl_package_version`` format) for CUDA ``cuda``, with the catalog's names and NVIDIA's dependency
    relation (dev on runtime, same version)."""
    runtime, dev = catalog().extras["nccl_stack"]["packages"]
    v = version
    lib = f"/usr/lib/{MULTIARCH}"
    return [
        Deb(runtime, v, files={f"{lib}/libnccl.so.{nccl}": (_library(nccl, work), 0o644),
                               f"{lib}/libnccl.so.2": (f"libnccl.so.{nccl}", -1)},
            description=f"clusterforge stand-in for NVIDIA NCCL {nccl} (CUDA {cuda})"),
        Deb(dev, v, depends=[f"{runtime} (= {v})"],
            files={"/usr/include/nccl.h": (_header(nccl), 0o644), f"{lib}/libnccl.so": ("libnccl.so.2", -1)},
            description=f"clusterforge stand-in for NVIDIA NCCL {nccl} headers (CUDA {cuda})"),
    ]


def cuda_build_packages(s: NcclStackSettings) -> list[Deb]:
    """The CUDA compiler and runtime-header packages the settings name (``cuda-nvcc-12-4``, ``cuda-cudart-dev-12-4``)
    under ``s.cuda_home``; the stand-in ``nvcc`` compiles plain C++ with the node's g++."""
    nvcc, cudart = s.build_packages[:2]
    nvcc_script = _script(
        f"# clusterforge stand-in for nvcc (CUDA {s.cuda}): no CUDA compiler here; the stand-in nccl-tests sources are\n"
        "# plain C++, compiled and linked by the node's g++ with the flags nccl-tests' Makefile passes.\n"
        'for a in "$@"; do [ "$a" = -c ] && exec g++ -x c++ "$@"; done\nexec g++ "$@"\n')
    return [
        Deb(nvcc, f"{s.cuda}.0-1", files={f"{s.cuda_home}/bin/nvcc": nvcc_script},
            description=f"clusterforge stand-in for the CUDA {s.cuda} compiler"),
        Deb(cudart, f"{s.cuda}.0-1", files={f"{s.cuda_home}/include/cuda_runtime.h": (
            f"/* clusterforge stand-in of CUDA {s.cuda}'s cuda_runtime.h */\n", 0o644)},
            description=f"clusterforge stand-in for the CUDA {s.cuda} runtime headers"),
    ]


TOP_MAKEFILE = """# clusterforge stand-in of nccl-tests' top-level Makefile (NVIDIA's layout: `make` builds src/ into build/)
BUILDDIR ?= build
override BUILDDIR := $(abspath $(BUILDDIR))
.PHONY: default src.build
default: src.build
src.build:
\t$(MAKE) -C src build BUILDDIR=$(BUILDDIR)
"""

SRC_MAKEFILE = """# clusterforge stand-in of nccl-tests' src/Makefile: NVIDIA's make variables and flags, plain C++ sources
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
MPI ?= 0
BUILDDIR ?= ../build
NVCUFLAGS := -O2 -DNCCL_TESTS_VERSION=\\"{version}\\"
NVLDFLAGS :=
ifneq ($(NCCL_HOME), "")
NVCUFLAGS += -I$(NCCL_HOME)/include/
NVLDFLAGS += -L$(NCCL_HOME)/lib
endif
ifeq ($(MPI), 1)
NVCUFLAGS += -DMPI_SUPPORT -I$(MPI_HOME)/include
NVLDFLAGS += -L$(MPI_HOME)/lib -L$(MPI_HOME)/lib64 -lmpi
endif
NVLDFLAGS += -lnccl
BIN_FILES := $(patsubst %,$(BUILDDIR)/%_perf,{collectives})
.PHONY: build
build: $(BIN_FILES)
$(BUILDDIR)/%.o: %.cu common.h
\t@mkdir -p $(BUILDDIR)
\t$(NVCC) -o $@ $(NVCUFLAGS) -c $<
$(BUILDDIR)/%_perf: $(BUILDDIR)/%.o $(BUILDDIR)/common.o
\t$(NVCC) -o $@ $^ $(NVLDFLAGS)
"""

COMMON_H = """#include "nccl.h"
#ifdef MPI_SUPPORT
#define OMPI_SKIP_MPICXX 1  /* the C API only (Open MPI's mpi.h pulls in its C++ bindings in C++ otherwise) */
#define MPICH_SKIP_MPICXX 1
#include "mpi.h"
#endif
int run(const char *name);
"""

COMMON_CU = r"""// clusterforge stand-in of nccl-tests' common code: prints nccl-tests' version line from the NCCL it was built
// against (headers) and runs against (library), and the MPI library it links, then says it measures nothing.
#include <cstdio>
#include <cstring>
#include "common.h"
int run(const char *name) {
  int lib = 0;
  ncclGetVersion(&lib);
  printf("# nccl-tests version %s nccl-headers=%d nccl-library=%d\n", NCCL_TESTS_VERSION, NCCL_VERSION_CODE, lib);
  printf("# Collective test starting: %s\n", name);
#ifdef MPI_SUPPORT
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  MPI_Get_library_version(v, &n);
  v[strcspn(v, "\n")] = 0;
  printf("# MPI library: %s\n", v);
#endif
  fprintf(stderr, "clusterforge stand-in of nccl-tests: no CUDA kernels, measures nothing\n");
  return 2;
}
"""

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce")
"""The binaries the stand-in builds (nccl-tests' names; the validation payload's ``BINARIES``)."""


def nccl_tests_release(version: str, out: Path) -> Path:
    """``out/v<version>.tar.gz``: the stand-in source release (top directory ``nccl-tests-<version>``, as GitHub's
    tag archive names it)."""
    files = {"Makefile": TOP_MAKEFILE, "README.md": "clusterforge stand-in of NVIDIA's nccl-tests source release\n",
             "src/Makefile": SRC_MAKEFILE.replace("{version}", version).replace("{collectives}", " ".join(COLLECTIVES)),
             "src/common.h": COMMON_H, "src/common.cu": COMMON_CU,
             **{f"src/{c}.cu": f'#include "common.h"\nint main() {{ return run("{c}_perf"); }}\n' for c in COLLECTIVES}}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"v{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"nccl-tests-{version}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return path


def torch_wheel(version: str, local: str, cuda: str, out: Path) -> Path:
    """A stand-in ``torch-<version>+<local>-py3-none-any.whl`` (``torch.__version__``, ``torch.version.cuda``)."""
    full = f"{version}+{local}"
    dist = f"torch-{full}.dist-info"
    files = {
        "torch/__init__.py": (f'"""clusterforge stand-in of the torch {full} wheel (not PyTorch)."""\n'
                              f'__version__ = "{full}"\nfrom . import version  # noqa: E402\n'),
        "torch/version.py": f'__version__ = "{full}"\ncuda = "{cuda}"\n',
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {full}\nSummary: clusterforge stand-in\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: clusterforge-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    records = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        records.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join(records + [f"{dist}/RECORD,,"]) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"torch-{full}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), text)
    return path


def newer(version: str) -> str:
    """The next minor release of ``X.Y.Z`` (``X.Y+1.0``): what an unpinned install would take."""
    x, y, _ = version.split(".")[:3]
    return f"{x}.{int(y) + 1}.0"


def older(version: str) -> str:
    """The patch release before ``X.Y.Z`` (``X.Y.Z-1``; ``X.Y-1.0`` for ``X.Y.0``)."""
    x, y, z = (int(p) for p in version.split(".")[:3])
    return f"{x}.{y}.{z - 1}" if z else f"{x}.{y - 1}.0"


def build_nccl_stack(root: Path, pool: Path, stacks: list[NcclStackSettings]) -> None:
    """Add the stand-ins of ``stacks`` to the mirror: NCCL (pinned, older, newer) and the CUDA build packages into
    the CUDA repository's ``pool``, the nccl-tests releases under ``root/nccl-tests/archive/refs/tags/``, the torch
    wheels under ``root/pytorch/whl/<cuXY>/torch/``."""
    work = root / ".nccl-build"
    seen: set[tuple[str, str]] = set()
    from .vendor_repo import build_deb

    for s in stacks:
        pinned = s.packages[0].split("=", 1)[1]  # 2.28.9-1+cuda13.0
        for nccl in (older(s.nccl), s.nccl, newer(s.nccl)):
            if (nccl, s.cuda) not in seen:
                seen.add((nccl, s.cuda))
                for pkg in nccl_packages(nccl, pinned.replace(f"{s.nccl}-", f"{nccl}-", 1), s.cuda, work):
                    build_deb(pkg, pool)
        if ("cuda", s.cuda) not in seen:
            seen.add(("cuda", s.cuda))
            for pkg in cuda_build_packages(s):
                build_deb(pkg, pool)
        nccl_tests_release(s.tests_version, root / "nccl-tests" / "archive" / "refs" / "tags")
        if s.torch:
            local = s.torch_index_url.rstrip("/").rsplit("/", 1)[1]
            for v in (s.torch, newer(s.torch)):
                torch_wheel(v, local, s.cuda, root / "pytorch" / "whl" / local / "torch")
