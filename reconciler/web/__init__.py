"""The HTTP application an engine serves: /metrics, /healthz, /readyz."""
