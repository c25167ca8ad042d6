"""From whatever the last run left on disk to a consistent store: recovery, the
checkpoint, the quarantine, the derived files' start check and rebuilds, and the
offline verification."""
