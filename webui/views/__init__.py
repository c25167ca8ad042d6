"""The console's pages, one module per section (overview, topics, groups, messages, trace,
config, audit, accounts)."""
