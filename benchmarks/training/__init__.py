"""Training steps end to end."""
