"""Operator actions, as typed functions that return values: trigger and cancel a manual run, pause and resume
tasks, backfill a past range, and the audit log every one of them (and apply) writes. The command line only calls
them and prints what they return."""
