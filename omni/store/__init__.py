"""The results store: one Parquet row per run, never deleted.

The column registry and the side tables' schemas, and a row's check against
them, are the facts layer (``columns`` and its declarations, ``side_tables``,
``row_check``). Writing, upgrading and reading the dataset, S3 paths and
conditional writes (``objstore``), compaction and retraction are the system
layer.
"""
