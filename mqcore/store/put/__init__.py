"""The put path's encoders: the general path's pending record and the batch/columnar
encoders for plain and keyed batches."""
