"""The KV cache: continuous slots, paged blocks with a prefix index, snapshots and their files."""
