"""The seed's own import paths (`netspy.core.batch_store` became `batchd.core.batch_store`)."""
