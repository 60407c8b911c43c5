"""Internal implementation package of sparsegrad (kept for old import paths)."""
