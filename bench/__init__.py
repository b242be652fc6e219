"""The benchmarks: `python -m bench compare` (bench/__main__.py), bench/batch.py, bench/scale.py."""
