"""Clusters: pools of replicas, routers, prefill/decode disaggregation, migration (docs/cluster.md)."""

from servesim.cluster.cluster import Cluster
from servesim.cluster.router import ROUTERS, ReplicaLoad, RouterState
from servesim.cluster.run import run_cluster
from servesim.cluster.spec import ClusterRun, PoolSpec

__all__ = ["ROUTERS", "Cluster", "ClusterRun", "PoolSpec", "ReplicaLoad", "RouterState", "run_cluster"]
