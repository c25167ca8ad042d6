"""The store's read paths: pull by queue offset, query by key, view by id, and raw
record views straight from the CommitLog's mappings."""
