"""Two `doctor serve` replicas, one actor: a lease in a shared store (etcd, or the Kubernetes Lease API) elects
the replica that may act; the other reads, judges and answers, and takes over when the lease expires."""
