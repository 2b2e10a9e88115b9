"""Where the dynamic shared-memory buffer starts in the shared window, for declared
alignments 16 to 4096 and a few sizes: prints `align size -> address (address % 2048)`."""

import numpy as np

from tilevm.backend.device_array import DeviceArray
from tilevm.backend.runtime import load_module

PTX = """.version 8.0
.target sm_90a
.address_size 64
.extern .shared .align {align} .b8 smem[];
.visible .entry probe(.param .u64 out) {{
  .reg .b32 %r<2>; .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, smem;
  st.global.u32 [%rd2], %r1;
  ret;
}}
"""

for align in (16, 128, 1024, 2048, 4096):
    fn = load_module(PTX.format(align=align)).get_function("probe")
    for size in (1024, 65536, 200000):
        out = DeviceArray.from_numpy(np.zeros(1, np.uint32), "uint32")
        fn.launch(1, 32, size, [out])
        addr = int(out.to_numpy()[0])
        print(f"align {align} size {size} -> {addr} ({addr % 2048} mod 2048)", flush=True)
