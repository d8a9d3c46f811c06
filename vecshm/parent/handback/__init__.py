"""Handing observations back: the results of a command, the slots and ring units they are lent from, and
their delivery as numpy arrays or torch tensors (on a GPU, from the page-locked segment)."""
