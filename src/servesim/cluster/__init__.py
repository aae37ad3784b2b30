"""Clusters: pools of replicas, routers, prefill/decode disaggregation, migration (docs/cluster.md)."""

from servesim.cluster.cluster import Cluster, ClusterRun, PoolSpec, run_cluster
from servesim.cluster.router import ROUTERS, ReplicaLoad, RouterState

__all__ = ["ROUTERS", "Cluster", "ClusterRun", "PoolSpec", "ReplicaLoad", "RouterState", "run_cluster"]
