"""Benchmarks, run on a GPU machine; each writes JSON, a table and a plot to a folder
given on the command line. (Added with the kernels.)"""
