"""Planning time, memory and quality."""
