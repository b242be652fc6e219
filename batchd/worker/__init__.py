"""The worker: its threads, the run of one task, the pipeline that lands items and writes tasks back."""
