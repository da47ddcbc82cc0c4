"""mfukit: the MFU-first toolkit for building and running GPU clusters for large-model training."""

__version__ = "0.1.0"
