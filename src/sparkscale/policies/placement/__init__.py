"""Cluster-wide placement policies (OTD, EDRP, Spark's own): one module each, registered by name
(`base.register_placement`). Pure, like the scaling policies: a `ClusterModel` in, a plan out."""
