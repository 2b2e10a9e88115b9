"""The IO-aware cost model of VM programs (seed "FlashAttention on a Napkin"): bytes moved
between memory levels with the reuse the loops imply, FLOPs by unit, occupancy and waves,
and against a GPU table the bound and which term binds (docs/cost-model.md)."""
