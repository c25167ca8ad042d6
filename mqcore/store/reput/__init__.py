"""Reput: the walk from CommitLog records to ConsumeQueue units and index keys, and
the writes of one dispatch batch."""
