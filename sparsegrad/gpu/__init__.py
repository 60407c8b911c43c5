"""GPU (cupy) backend of sparsegrad; cupy is imported only inside this package."""
