"""Compiler passes, one per module; `tilevm.backend.pipeline` lists them in order."""
