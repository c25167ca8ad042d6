"""Files under the store: mapped segment files, ordered segment queues, pre-faulting,
the C library calls, the store and service locks, and disk-space reservation."""
