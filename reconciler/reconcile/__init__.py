"""GitOps: the pure diff, verdict and rails, apply in one transaction, revisions, export."""
