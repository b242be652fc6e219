"""The batchd command, one module per verb group."""
