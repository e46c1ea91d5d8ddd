"""reconciler: a declarative, GitOps-driven scheduler of HTTP calls on PostgreSQL."""

__version__ = "0.1.0"
