"""What the parent and the workers both read: the protocol's words, the segment's layout, the
transport and its wake-ups."""
