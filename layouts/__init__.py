"""Layouts: which thread holds which tile element (register layouts), where each byte
sits in shared memory (shared layouts, swizzles), and views over global memory."""
