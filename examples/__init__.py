"""Examples of workflows metamorph tests as the system under test."""
