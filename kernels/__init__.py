"""Ready kernels built on the VM: the quantized matmul and its weight packers.
(Built by the kernels issue; nothing lives here yet.)"""
