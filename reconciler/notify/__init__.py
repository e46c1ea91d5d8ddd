"""Notifications: events of runs (pure), the outbox, delivery."""
