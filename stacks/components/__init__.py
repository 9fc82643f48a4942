"""ComponentResources of the clusterforge stack.

Type tokens live in one namespace: ``clusterforge:aws:<Name>`` for AWS resources and
``clusterforge:k8s:<Name>`` for Kubernetes ones. Each component takes a frozen ``…Args``
dataclass, creates its children with ``parent=self`` under names prefixed with its own name,
exposes typed ``Output`` attributes and calls ``register_outputs`` last.
"""

from .eks import EksCluster, EksClusterArgs
from .iam import NodeIam, NodeIamArgs
from .k8s_addons import AddonsArgs, FsxVolume, KubernetesAddons, SandboxClass
from .lustre import LustreFileSystem, LustreFileSystemArgs
from .network import Network, NetworkArgs
from .nodes import EksAttachment, NicSlot, NodeGroupArgs, NodeGroupComponent, efa_layout
from .placement import Placement, PlacementArgs, PlacementDecision, decide_placement
from .slurm import SlurmCluster, SlurmClusterArgs

__all__ = [
    "AddonsArgs",
    "EksAttachment",
    "EksCluster",
    "EksClusterArgs",
    "FsxVolume",
    "KubernetesAddons",
    "LustreFileSystem",
    "LustreFileSystemArgs",
    "Network",
    "NetworkArgs",
    "NicSlot",
    "NodeGroupArgs",
    "NodeGroupComponent",
    "NodeIam",
    "NodeIamArgs",
    "Placement",
    "PlacementArgs",
    "PlacementDecision",
    "SandboxClass",
    "SlurmCluster",
    "SlurmClusterArgs",
    "decide_placement",
    "efa_layout",
]
