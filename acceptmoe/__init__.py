"""AcceptMoE: commitment-weighted, self-sizing verifier expert sets for MoE speculative decoding."""
__version__ = "0.1.0"
