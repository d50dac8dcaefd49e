"""One-off A/B runs against older code."""
