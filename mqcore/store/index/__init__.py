"""The IndexFile: one hash index file, its structural check, its bulk put, and the
ordered set of index files that answers queries by key and time."""
