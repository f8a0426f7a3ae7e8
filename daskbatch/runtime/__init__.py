"""The running environment: clusters, signals, locks and thread limits."""
