"""The data engine of co-evolution: failure diagnosis (`diagnose`) and memory-guided generation (`generate`)."""
