"""Edge circuits: the residual-stream graph of any model, EAP and EAP-IG scores, exact edge
patching, circuits and their faithfulness (Hanna et al. 2024; the MIB benchmark)."""
