"""Outbound HTTP: requests to targets, auth flows, token cache, secrets and their scrubbing."""
