"""Getting the items out: `batchd export` reads an item table in constant memory and writes JSON lines, CSV or
Parquet (formats.py says how each value is written, item_export.py which table and which rows)."""
