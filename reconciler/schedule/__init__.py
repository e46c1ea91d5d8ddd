"""Pure time: triggers, DST rules, previews, catch-up and schedules in words; no I/O."""
