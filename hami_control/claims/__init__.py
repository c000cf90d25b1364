"""DRA claims against namespace GPU quotas: the book kept under the state lock, the
scheduling gate that holds DRA pods to their quota, the driver's published GPUs."""
